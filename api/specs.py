"""Service objects of the REST API: validation and preparation.

A client POSTs a service object to ``/environments/{id}/services`` (a
*create spec*, seed chapter 4 "Create Object Specs"), may later PUT it back
whole or edit one attribute by sub-path, and GETs it with its passwords
masked.  This module decides what is acceptable and fills in what the server
owns:

* :func:`validate_create` -- the strict check of a new service: known type,
  required fields present, every field of the right JSON type, no unknown
  field (a typo such as ``adminPasword`` is an error, not a silently dropped
  password);
* :func:`validate_update` -- the check after a PUT or a sub-path edit: the
  same rules, but "user can update or add any attribute" (seed), so unknown
  fields and the server/workflow-owned ``id``/``created``/``updated``/
  ``state``/``temp`` are accepted anywhere;
* :func:`prepare_new` / :func:`prepare_units` -- ids, timestamps and the unit
  names (``<service name>_instance_<n>``) that the 0.2 workflows rely on: on
  every path an object without an id gets one, from its Murano object header
  (``"?": {"id": ..., "type": ...}``, :mod:`fornace.api.objectheaders`) when
  it has one -- :func:`headed` -- else a new one;
* :func:`masked_view` / :func:`keep_secrets` -- a GUI GETs a masked object and
  PUTs it back: the stored passwords must survive the round trip.

Service types are data: each type's create spec is the JSON Schema of its
catalog entry (``data/types.json``, :mod:`fornace.common.typeschema`), and
this module is the engine that applies it -- no type is written in Python.
The catalog is the API's (``catalog_file``); a catalog that declares no
schema (the operations of an older data folder) gets the built-in types'.
The engine's own rules, beyond the schema: an optional field may be null
(the seed: "may be empty/null/omitted"), the strict create refuses fields
the schema does not declare in the service and its units, unit ids are
unique, and ids and names follow :mod:`fornace.common.names` whatever the
type's schema says (the message contract and the database must take them:
a service or unit ``id`` is an id, a ``name`` has no control character and
fits, a service's with room for its units' ``<name>_instance_<n>``).
Every problem is a :class:`SpecError` (an HTTP 400) naming the field path, e.g. ``units[1].isMaster``.

Types come from workflow packages, so their schemas are a tenant's input:
a field's ``pattern`` is matched by RE2 (:mod:`fornace.common.patterns`:
linear time, on a bounded text), and the work of one validation is bounded
(:mod:`fornace.api.validationbudget`): past it, a 400 "validation took too
long".  The recursion follows the schema, whose nesting the catalog bounds.
"""
from __future__ import annotations

import copy
import ipaddress
import re
import uuid
from typing import Any, Iterable, Mapping

from fornace.api import objectheaders
from fornace.api.objectheaders import HEADER, SERVICE_KEYS, UNIT_KEYS
from fornace.common import names
from fornace.common.catalog import Catalog, builtin_catalog, declared_secrets
from fornace.api.validationbudget import BudgetExceeded, ValidationBudget
from fornace.common.errors import FornaceError, shortened
from fornace.common.namedchecks import (KIND_NAMES, SERVICE_CHECKS, VALUE_CHECKS,
                                        VALUE_KINDS, describe, json_kind)
from fornace.common.patterns import PatternError, compile_pattern
from fornace.common.secrets import MASK, is_secret_key, mask_text, masked
from fornace.common.typeschema import FieldSpec, TypeSpec

__all__ = [
    "SpecError", "FieldSpec", "TypeSpec", "SERVICE_TYPES", "service_types", "MANAGED_KEYS",
    "validate_create", "validate_update", "headed", "prepare_new", "prepare_units",
    "keep_secrets", "masked_view", "declared_secrets", "check_value",
]


class SpecError(FornaceError, ValueError):
    """A 400: names the field path (e.g. ``units[1].isMaster``) and what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def __reduce__(self):  # keep pickling (e.g. across processes) working
        return (type(self), (self.field, self.message))


MANAGED_KEYS = frozenset({"id", "created", "updated", "state", "temp"})
"""Keys the server and the workflows own; always accepted by validate_update."""


def service_types(catalog: Catalog | None = None) -> Mapping[str, TypeSpec]:
    """The create specs of ``catalog``'s concrete types (the built-in ones
    when it is None or declares none)."""
    if catalog is not None and catalog.service_types:
        return catalog.service_types
    return builtin_catalog().service_types


SERVICE_TYPES: Mapping[str, TypeSpec] = service_types()
"""The built-in catalog's types (the command line's, the tests')."""


# -- validation ---------------------------------------------------------------

def validate_create(service: Any, catalog: Catalog | None = None) -> None:
    """Full check of a service object POSTed to ``/environments/{id}/services``."""
    _validate(service, service_types(catalog), strict=True)


def validate_update(service: Any, catalog: Catalog | None = None) -> None:
    """Check of a whole service after a PUT or a sub-path edit.

    Same types and rules as :func:`validate_create` and required fields are
    still required, but unknown fields (and ``id``/``created``/``updated``/
    ``state``/``temp``) are accepted anywhere.
    """
    _validate(service, service_types(catalog), strict=False)


def _validate(service: Any, types: Mapping[str, TypeSpec], *, strict: bool) -> None:
    try:
        _validate_within(headed(service), types, strict, ValidationBudget())
    except BudgetExceeded as exc:
        raise SpecError(exc.path, exc.message) from None


def _validate_within(service: Any, types: Mapping[str, TypeSpec], strict: bool,
                     budget: ValidationBudget) -> None:
    if not isinstance(service, dict):
        raise SpecError("service", f"must be a JSON object, not {describe(service)}")
    spec = _type_of(service, types)
    _check_fields(service, spec.all_fields, "", strict, f"a {spec.name} service", budget,
                  extra=("type", "units", HEADER))
    units = _check_units(service, spec, strict, budget)
    _check_id_and_name(service, "", names.SERVICE_NAME_MAX)
    for index, unit in enumerate(units):
        _check_id_and_name(unit, f"units[{index}]", names.NAME_MAX)
    _refuse_nul(service, budget)
    seen: dict[str, int] = {}
    for index, unit in enumerate(units):
        unit_id = unit.get("id")
        if unit_id is None:
            continue
        if unit_id in seen:
            raise SpecError(f"units[{index}].id",
                            f"duplicate unit id {unit_id!r} (also units[{seen[unit_id]}])")
        seen[unit_id] = index
    for name in spec.checks:
        problem = SERVICE_CHECKS[name](service)
        if problem is not None:
            raise SpecError(*problem)


def headed(service: Any) -> Any:
    """``service`` with the ``id`` and ``type`` its Murano object header
    (``"?"``, :mod:`fornace.api.objectheaders`) gives, and its units' ids from
    theirs: a copy of the service and its units (the rest shared); a
    :class:`SpecError` for a header that cannot be used."""
    if not isinstance(service, dict):
        return service
    copied = _taken(dict(service), "", SERVICE_KEYS)
    units = copied.get("units")
    if isinstance(units, list):
        copied["units"] = [_taken(dict(unit), f"units[{index}]", UNIT_KEYS)
                           if isinstance(unit, dict) else unit
                           for index, unit in enumerate(units)]
    return copied


def _taken(obj: dict, prefix: str, keys: tuple[str, ...]) -> dict:
    problem = objectheaders.header_problem(obj, prefix, keys)
    if problem is not None:
        raise SpecError(*problem)
    return objectheaders.take_header(obj, keys)


def _check_id_and_name(obj: dict, prefix: str, name_max: int) -> None:
    """The rule of :mod:`fornace.common.names` for ``obj``'s ``id`` and ``name``
    (when given: the server makes them otherwise)."""
    if obj.get("id") is not None:
        problem = names.id_problem(obj["id"])
        if problem is not None:
            raise SpecError(_join(prefix, "id"), problem)
    if obj.get("name") is not None:
        problem = names.name_problem(obj["name"], name_max)
        if problem is not None:
            raise SpecError(_join(prefix, "name"), problem)


def _type_of(service: dict, types: Mapping[str, TypeSpec]) -> TypeSpec:
    if "type" not in service:
        raise SpecError("type", "required")
    kind = service["type"]
    if not isinstance(kind, str):
        raise SpecError("type", f"must be a string, not {describe(kind)}")
    spec = types.get(kind)
    if spec is None:
        known = ", ".join(sorted(types))
        raise SpecError("type", f"unknown service type {kind!r} (known: {known})")
    return spec


def _check_units(service: dict, spec: TypeSpec, strict: bool,
                 budget: ValidationBudget) -> list[dict]:
    if "units" not in service:
        raise SpecError("units", "required")
    units = service["units"]
    if not isinstance(units, list):
        raise SpecError("units", f"must be a list of unit objects, not {describe(units)}")
    if len(units) < spec.min_units:
        need = "at least one unit" if spec.min_units == 1 else f"at least {spec.min_units} units"
        raise SpecError("units", f"a {spec.name} service needs {need} (got {len(units)})")
    if spec.max_units is not None and len(units) > spec.max_units:
        raise SpecError("units", f"a {spec.name} service takes at most {spec.max_units} units "
                                 f"(got {len(units)})")
    for index, unit in enumerate(units):
        path = f"units[{index}]"
        if not isinstance(unit, dict):
            raise SpecError(path, f"must be a unit object, not {describe(unit)}")
        _check_fields(unit, spec.all_unit_fields, path, strict, f"a {spec.name} unit", budget,
                      extra=(HEADER,))
    return units


def _check_fields(obj: dict, fields: Mapping[str, FieldSpec], prefix: str, strict: bool,
                  what: str, budget: ValidationBudget, extra: Iterable[str] = ()) -> None:
    if strict:  # unknown fields first: a typo is more useful than "x: required"
        allowed = set(fields) | set(extra)
        for key in obj:
            if key not in allowed:
                names = ", ".join(sorted(allowed))
                raise SpecError(_join(prefix, key),
                                f"unknown field for {what} (allowed: {names})")
    for spec in fields.values():
        path = _join(prefix, spec.name)
        if spec.name not in obj or (obj[spec.name] is None and not spec.required):
            if spec.required:
                raise SpecError(path, "required")
            continue
        _checked(spec.schema, obj[spec.name], path, budget,
                 secret=spec.secret or is_secret_key(spec.name))


def check_value(schema: Mapping[str, Any], value: Any, path: str,
                budget: ValidationBudget | None = None, secret: bool = False) -> None:
    """:class:`SpecError` when ``value`` (at ``path``) does not fit ``schema``:
    its JSON type first, then the schema's checks, then its named checks.
    ``budget``: the work it may do (a fresh :class:`ValidationBudget` when None).

    The error of a secret value (``secret``, or a ``writeOnly`` schema) says
    what is wrong without quoting it: the answer, a log or a form may show it."""
    try:
        _checked(schema, value, path, budget or ValidationBudget(), secret)
    except BudgetExceeded as exc:
        raise SpecError(exc.path, exc.message) from None


def _checked(schema: Mapping[str, Any], value: Any, path: str, budget: ValidationBudget,
             secret: bool = False) -> None:
    """:func:`_check_value`, a secret value's error unquoted."""
    if secret or schema.get("writeOnly") is True:
        try:
            _check_value(schema, value, path, budget)
        except SpecError as exc:
            raise SpecError(exc.field, unquoted(exc.message, value)) from None
    else:
        _check_value(schema, value, path, budget)


def unquoted(message: str, value: Any) -> str:
    """``message`` without the secret ``value`` or any part of it: the checks'
    ``(got ...)`` dropped, any other quotation of it replaced by ``***``."""
    message = message.split(" (got ", 1)[0]
    quoted = {repr(part) for part in _parts(value)
              if isinstance(part, str) or (isinstance(part, (int, float)) and
                                           len(repr(part)) >= 4)}   # not a bound's digit
    return mask_text(message, quoted) if quoted else message


def _parts(value: Any) -> Iterable[Any]:
    """``value`` and every value inside it (an error may quote any of them)."""
    yield value
    items = value.values() if isinstance(value, dict) else value if isinstance(
        value, list) else ()
    for item in items:
        yield from _parts(item)


def _check_value(schema: Mapping[str, Any], value: Any, path: str,
                 budget: ValidationBudget) -> None:
    budget.spend(1, path)
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    if kinds and not any(_is_kind(value, kind) for kind in kinds):
        expected = " or ".join(KIND_NAMES[k] for k in kinds)
        raise SpecError(path, f"must be {expected}, not {describe(value)}")
    if "enum" in schema:
        budget.spend(len(schema["enum"]), path)
    if "enum" in schema and value not in schema["enum"]:
        shown = ", ".join(repr(v) for v in schema["enum"])
        raise SpecError(path, f"must be one of {shown} (got {value!r})")
    names = schema.get("x-check", [])
    names = [names] if isinstance(names, str) else names
    kind = json_kind(value)
    if "nonblank" in names and kind in VALUE_KINDS["nonblank"]:
        _named(VALUE_CHECKS["nonblank"], value, path)   # "empty" before any other problem
    if isinstance(value, str):
        _check_string(schema, value, path, budget)
    elif kind in ("integer", "number"):
        _check_number(schema, value, path)
    elif isinstance(value, list):
        _check_array(schema, value, path, budget)
    elif isinstance(value, dict):
        _check_object(schema, value, path, budget)
    for name in names:
        if name != "nonblank" and kind in VALUE_KINDS[name]:
            _named(VALUE_CHECKS[name], value, path)


def _named(check: Any, value: Any, path: str) -> None:
    problem = check(value)
    if isinstance(problem, tuple):
        suffix, message = problem
        raise SpecError(path + suffix, message)
    if problem:
        raise SpecError(path, problem)


def _check_string(schema: Mapping[str, Any], value: str, path: str,
                  budget: ValidationBudget) -> None:
    if "minLength" in schema and len(value) < schema["minLength"]:
        raise SpecError(path, f"must have at least {schema['minLength']} characters")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        raise SpecError(path, f"must have at most {schema['maxLength']} characters")
    if "pattern" in schema:
        _check_pattern(schema["pattern"], value, path, budget)
    problem = _FORMATS.get(schema.get("format"), lambda v: None)(value)
    if problem:
        raise SpecError(path, problem)


def _check_pattern(pattern: Any, value: str, path: str, budget: ValidationBudget) -> None:
    """JSON Schema's ``pattern`` (an unanchored search), by RE2 and within budget."""
    try:
        compiled = compile_pattern(pattern)
    except PatternError as exc:   # the catalog refuses such types; never a 500
        raise SpecError(path, f"the type's pattern cannot be used: {exc}") from None
    if len(value) > compiled.max_chars:
        raise SpecError(path, f"is too long to check against the pattern {pattern!r}: at most "
                              f"{compiled.max_chars} characters (got {len(value)})")
    budget.spend(compiled.cost(value), path)
    if not compiled.search(value):
        raise SpecError(path, f"must match the pattern {pattern!r} "
                              f"(got {shortened(repr(value), 200)})")


def _check_number(schema: Mapping[str, Any], value: int | float, path: str) -> None:
    low, high = schema.get("minimum"), schema.get("maximum")
    noun = f"{schema['x-noun']} " if schema.get("x-noun") else ""
    if (low is not None and value < low) or (high is not None and value > high):
        if low is not None and high is not None:
            raise SpecError(path, f"must be {noun}between {low} and {high}")
        bound = f"at least {low}" if low is not None else f"at most {high}"
        raise SpecError(path, f"must be {noun}{bound}")


def _check_array(schema: Mapping[str, Any], value: list, path: str,
                 budget: ValidationBudget) -> None:
    if "minItems" in schema and len(value) < schema["minItems"]:
        raise SpecError(path, f"must have at least {_items(schema['minItems'])}")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        raise SpecError(path, f"must have at most {_items(schema['maxItems'])}")
    items = schema.get("items")
    if isinstance(items, Mapping):
        for index, item in enumerate(value):
            _checked(items, item, f"{path}[{index}]", budget)
    if schema.get("uniqueItems"):
        seen: list[Any] = []
        for index, item in enumerate(value):
            budget.spend(len(seen) + 1, f"{path}[{index}]")
            if item in seen:
                raise SpecError(f"{path}[{index}]", f"duplicate value {item!r}")
            seen.append(item)


def _items(count: int) -> str:
    return "1 item" if count == 1 else f"{count} items"


def _check_object(schema: Mapping[str, Any], value: dict, path: str,
                  budget: ValidationBudget) -> None:
    """A nested object (an ``osImage``): its declared properties as a
    service's, the others against ``additionalProperties``."""
    properties = schema.get("properties") or {}
    required = schema.get("required") or []
    for name, sub in properties.items():
        where = f"{path}.{name}"
        if name not in value or (value[name] is None and name not in required):
            if name in required:
                raise SpecError(where, "required")
            continue
        _checked(sub, value[name], where, budget, secret=is_secret_key(name))
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            continue
        if extra is False:
            raise SpecError(f"{path}.{name}", f"unknown field (allowed: "
                                              f"{', '.join(sorted(properties))})")
        if isinstance(extra, Mapping):
            _checked(extra, item, f"{path}.{name}", budget, secret=is_secret_key(name))


def _ip(version: int) -> Any:
    def check(value: str) -> str | None:
        try:
            if ipaddress.ip_address(value).version == version:
                return None
        except ValueError:
            pass
        return f"must be an IPv{version} address (got {value!r})"
    return check


_HOSTNAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
_FORMATS = {
    "ipv4": _ip(4),
    "ipv6": _ip(6),
    "hostname": lambda v: None if _HOSTNAME.fullmatch(v) else f"must be a hostname (got {v!r})",
}


def _is_kind(value: Any, kind: str) -> bool:
    actual = json_kind(value)
    return actual == kind or (kind == "number" and actual == "integer")


def _refuse_nul(service: dict, budget: ValidationBudget) -> None:
    """A NUL (U+0000) in any string of the service, key or value, is a
    :class:`SpecError` at its path: PostgreSQL's text columns refuse it, and a
    workflow may copy any field into a report."""
    for path, text, is_key in names.texts(service):
        budget.spend(1, path or "service")
        if "\x00" not in text:
            continue
        if is_key:
            raise SpecError(path or "service", "a field name must not contain NUL (U+0000)")
        raise SpecError(path, "must not contain NUL (U+0000): it cannot be stored")


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


# -- preparation --------------------------------------------------------------

def new_id() -> str:
    return uuid.uuid4().hex


def prepare_new(service: dict, now: str, existing: list[dict]) -> dict:
    """A copy of a validated create spec, ready to store.

    The service gets an id (unless given: then it must not clash with any
    service or unit of ``existing``), ``created``/``updated`` = ``now``, and
    every unit an id and a ``<service name>_instance_<n>`` name.  Ids must be
    unique in the whole environment: the workflow engine mutes rule matches
    by object id.
    """
    prepared = headed(copy.deepcopy(service))
    taken = _ids_in(existing)
    given = prepared.get("id")
    if given is None:
        prepared["id"] = new_id()
    elif given in taken:
        raise SpecError("id", f"id {given!r} is already used in this environment")
    taken.add(prepared["id"])
    for index, unit in enumerate(prepared.get("units") or []):
        unit_id = unit.get("id") if isinstance(unit, dict) else None
        if unit_id is not None and unit_id in taken:
            raise SpecError(f"units[{index}].id",
                            f"id {unit_id!r} is already used in this environment")
        if unit_id is not None:
            taken.add(unit_id)
    prepared["created"] = now
    prepared["updated"] = now
    return _default_units(prepared)


def prepare_units(service: dict) -> dict:
    """A copy with an id for the service and ids and names for its units when
    they have none (a PUT replacing services or adding units): from their
    object headers (``"?"``) when these give them, else new ones."""
    prepared = headed(copy.deepcopy(service))
    if prepared.get("id") is None:
        prepared["id"] = new_id()
    return _default_units(prepared)


def _default_units(service: dict) -> dict:
    objectheaders.sync_header(service)
    units = service.get("units")
    if not isinstance(units, list):
        return service
    base = f"{service.get('name')}_instance_"
    names = {u.get("name") for u in units if isinstance(u, dict)}
    for index, unit in enumerate(units):
        if not isinstance(unit, dict):
            continue
        if unit.get("id") is None:
            unit["id"] = new_id()
        objectheaders.sync_header(unit)
        if unit.get("name") is None:
            number = index
            while f"{base}{number}" in names:  # e.g. after a unit was removed
                number += 1
            unit["name"] = f"{base}{number}"
            names.add(unit["name"])
    return service


def _ids_in(services: Iterable[Any]) -> set[str]:
    ids = set()
    for service in services or ():
        if not isinstance(service, dict):
            continue
        if isinstance(service.get("id"), str):
            ids.add(service["id"])
        units = service.get("units")
        for unit in units if isinstance(units, list) else ():
            if isinstance(unit, dict) and isinstance(unit.get("id"), str):
                ids.add(unit["id"])
    return ids


# -- secrets ------------------------------------------------------------------

def masked_view(value: Any, catalog: Catalog | None = None) -> Any:
    """A copy with every secret field's (non-null) value replaced by ``***``:
    fields named like passwords, and those the catalog's schemas declare
    secret (any type's: a service's type may be unknown or wrong)."""
    return masked(value, keys=declared_secrets(catalog))


def keep_secrets(new: Any, old: Any, catalog: Catalog | None = None) -> Any:
    """``new`` with masked secret fields (value ``***``) restored from ``old``.

    Dicts are matched by key; list items that have an ``id`` are matched by
    id (so reordered units keep their passwords; a unit with an unknown id
    restores nothing), items without one by index.  A real new password is
    kept.  ``new`` is not modified.  Secret fields are those
    :func:`masked_view` masks.
    """
    return _keep(new, old, declared_secrets(catalog))


def _keep(new: Any, old: Any, keys: frozenset[str]) -> Any:
    if isinstance(new, dict):
        source = old if isinstance(old, dict) else {}
        result = {}
        for key, value in new.items():
            if (value == MASK and (is_secret_key(key) or key in keys)
                    and source.get(key) is not None):
                result[key] = copy.deepcopy(source[key])
            else:
                result[key] = _keep(value, source.get(key), keys)
        return result
    if isinstance(new, list):
        source = old if isinstance(old, list) else []
        by_id = {item["id"]: item for item in source
                 if isinstance(item, dict) and _hashable(item.get("id"))}
        result_list = []
        for index, item in enumerate(new):
            if isinstance(item, dict) and item.get("id") is not None:
                match = by_id.get(item["id"]) if _hashable(item["id"]) else None
            else:
                match = source[index] if index < len(source) else None
            result_list.append(_keep(item, match, keys))
        return result_list
    return new


def _hashable(value: Any) -> bool:
    return value is not None and isinstance(value, (str, int, float, bool))
