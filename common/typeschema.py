"""Service types' create specs: the JSON Schema of each catalog type.

A type of ``data/types.json`` may carry a ``schema`` (a subset of JSON
Schema draft 2020-12) describing its service objects: ``properties`` with
their ``type``, ``required``, ``default``, ``title`` (the form's label) and
``description`` (its help), ``writeOnly: true`` for a secret, and the
checks JSON Schema has (``enum``, ``pattern``, ``minLength``/``maxLength``,
``minimum``/``maximum``, ``minItems``/``maxItems``, ``uniqueItems``,
``format``: ``ipv4``, ``ipv6``, ``hostname``).  ``properties.units`` is the
list of units: ``minItems``/``maxItems`` bound their number and ``items``
describes a unit object.  Keywords of Fornace's own:

* ``x-check``: a name or a list of names of :mod:`fornace.common.namedchecks`
  -- on a property, checks of its value; on the type's schema, checks of the
  whole service (``exactly-one-master``);
* ``x-form: false``: a field the type's workflows do not use: the API still
  accepts it, the dashboard's form does not offer it;
* ``x-input: "services"``: a list of ids of the environment's other
  services (the form offers a choice among them);
* ``x-noun``: what the value is, in range errors ("must be *a port number*
  between 1 and 65535").

A type inherits its ancestors' schema along ``extends``: the nearer type's
keywords replace the farther's, except ``properties`` (and ``items``),
merged name by name and keyword by keyword -- ``"osImage": {"default":
...}`` only gives a default -- and a property set to ``false`` is removed
(the subtype does not have it).  So ``required``, when a type gives it,
lists all the required fields of the type.

:func:`resolve` checks every schema when the catalog is read (its nesting
first, at most :data:`MAX_DEPTH` levels, so that nothing recursive over it
goes deep; the schema against the draft 2020-12 metaschema with the
``jsonschema`` library, then the subset: a keyword the engine would not
enforce is refused, not ignored; every ``pattern`` compiled by RE2,
:mod:`fornace.common.patterns`) and gives a :class:`TypeSpec` per concrete
type; the validation itself is :mod:`fornace.api.specs`'s.  A
:class:`SchemaError` carries the JSON path of the place in the schema
(``steps``), for the catalog to name the line of its file.
"""
from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from fornace.common.errors import FornaceError
from fornace.common.jsonlimits import DEFAULT_MAX_DEPTH, JsonLimitError, measure
from fornace.common.namedchecks import SERVICE_CHECKS, VALUE_CHECKS, VALUE_KINDS
from fornace.common.patterns import PatternError, check_pattern

JSON_TYPES = frozenset({"string", "boolean", "integer", "number", "array", "object", "null"})
FORMATS = frozenset({"ipv4", "ipv6", "hostname"})
INPUTS = frozenset({"services"})
KEYWORDS = frozenset({
    "$schema", "$comment", "type", "properties", "required", "additionalProperties", "items",
    "default", "title", "description", "examples", "writeOnly", "enum", "pattern",
    "minLength", "maxLength", "minimum", "maximum", "minItems", "maxItems", "uniqueItems",
    "format", "x-check", "x-form", "x-input", "x-noun",
})
UNITS = "units"
#: The deepest a type's schema nests (JSON levels): what recurses over schemas
#: (the metaschema's check, merging, validation) stays far from Python's limit.
MAX_DEPTH = DEFAULT_MAX_DEPTH
_MAX_SCHEMA_BYTES = 64 * 1024 * 1024   # the depth is what is bounded here


class SchemaError(FornaceError):
    """A schema of the catalog the engine cannot use (names the type and keyword).

    ``steps``: the JSON path of the place inside the schema, when known
    (``["properties", "port", "pattern"]``)."""

    def __init__(self, message: str, steps: Sequence[Any] | None = None) -> None:
        super().__init__(message)
        self.steps = None if steps is None else list(steps)
        self.type_name: str | None = None   # the type whose schema it is, when known


@dataclass(frozen=True)
class FieldSpec:
    """One property of a service or unit object, from the merged schema."""

    name: str
    schema: Mapping[str, Any]
    required: bool

    @property
    def kinds(self) -> tuple[str, ...]:
        """The JSON types it may have (empty: any)."""
        kind = self.schema.get("type")
        if kind is None:
            return ()
        return (kind,) if isinstance(kind, str) else tuple(kind)

    @property
    def doc(self) -> str:
        return str(self.schema.get("description") or "")

    @property
    def title(self) -> str | None:
        return self.schema.get("title")

    @property
    def default(self) -> Any:
        return copy.deepcopy(self.schema.get("default"))

    @property
    def shown(self) -> bool:
        """False for ``x-form: false``: the form does not offer it."""
        return self.schema.get("x-form", True) is not False

    @property
    def input(self) -> str | None:
        return self.schema.get("x-input")

    @property
    def secret(self) -> bool:
        return self.schema.get("writeOnly") is True


@dataclass(frozen=True)
class TypeSpec:
    """The create spec of one concrete service type.

    ``fields`` and ``unit_fields`` are the type's own (not those every type
    has, which the farthest ancestor declares), in the schema's order.
    """

    name: str
    schema: Mapping[str, Any]
    fields: tuple[FieldSpec, ...]
    unit_fields: tuple[FieldSpec, ...]
    all_fields: Mapping[str, FieldSpec]
    all_unit_fields: Mapping[str, FieldSpec]
    min_units: int = 1
    max_units: int | None = None
    checks: tuple[str, ...] = ()
    doc: str = ""
    secrets: frozenset[str] = field(default=frozenset())

    def service_fields(self) -> dict[str, FieldSpec]:
        """Every field of the service but ``units``, in order."""
        return dict(self.all_fields)

    def unit_field_specs(self) -> dict[str, FieldSpec]:
        return dict(self.all_unit_fields)


# -- merging along extends ------------------------------------------------------------

def merge(parent: Mapping[str, Any], child: Mapping[str, Any]) -> dict[str, Any]:
    """``child`` over ``parent`` (see the module docstring)."""
    result = copy.deepcopy(dict(parent))
    for key, value in child.items():
        if key == "properties" and isinstance(value, dict):
            properties = result.get("properties") or {}
            for name, sub in value.items():
                if sub is False:
                    properties.pop(name, None)
                elif isinstance(properties.get(name), dict) and isinstance(sub, dict):
                    properties[name] = merge(properties[name], sub)
                else:
                    properties[name] = copy.deepcopy(sub)
            result["properties"] = properties
        elif key == "items" and isinstance(value, dict) and isinstance(result.get("items"), dict):
            result["items"] = merge(result["items"], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


# -- checking one type's own schema ---------------------------------------------------

def check_schema(where: str, schema: Any) -> None:
    """A type's own ``schema`` entry: valid draft 2020-12, and only the
    keywords the engine enforces, used as it understands them."""
    if not isinstance(schema, dict):
        raise SchemaError(f"{where} must be an object (a JSON Schema)", [])
    try:
        measure(schema, max_bytes=_MAX_SCHEMA_BYTES, max_depth=MAX_DEPTH)
    except JsonLimitError as exc:
        raise SchemaError(f"{where}: {exc}") from None
    _checked(where, json.dumps(schema, sort_keys=True))


@functools.lru_cache(maxsize=512)   # the same catalog is read by every Store of a process
def _checked(where: str, text: str) -> None:
    schema = json.loads(text)
    _metaschema(where, schema)
    _subset(where, schema, (), top=True)


@functools.lru_cache(maxsize=1)
def _metavalidator() -> Any:
    from jsonschema import Draft202012Validator  # only when a catalog is read

    return Draft202012Validator(Draft202012Validator.META_SCHEMA)


def _metaschema(where: str, schema: dict) -> None:
    errors = sorted(_metavalidator().iter_errors(schema),
                    key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        first = errors[0]
        place = ".".join(str(p) for p in first.absolute_path)
        raise SchemaError(f"{where}{'.' + place if place else ''}: {first.message}",
                          first.absolute_path)


def _names(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _subset(where: str, schema: Any, steps: tuple[Any, ...], top: bool = False) -> None:
    if schema is False and not top:
        return  # a property removed by a subtype
    if not isinstance(schema, dict):
        raise SchemaError(f"{where} must be an object (a schema), or false to remove it", steps)
    unknown = sorted(set(schema) - KEYWORDS)
    if unknown:
        raise SchemaError(f"{where}: unsupported keyword(s) {', '.join(unknown)} "
                          f"(supported: {', '.join(sorted(KEYWORDS))})", steps + (unknown[0],))
    if "pattern" in schema:
        try:
            check_pattern(schema["pattern"])
        except PatternError as exc:
            raise SchemaError(f"{where}.pattern: {exc}", steps + ("pattern",)) from None
    kinds = set(_names(schema.get("type", [])))
    bad = kinds - JSON_TYPES
    if bad:
        raise SchemaError(f"{where}.type: unknown JSON type(s) {', '.join(sorted(map(str, bad)))}",
                          steps + ("type",))
    for name in _names(schema.get("x-check", [])):
        if top:
            if name not in SERVICE_CHECKS:
                raise SchemaError(f"{where}.x-check: unknown service check {name!r} (known: "
                                  f"{', '.join(sorted(SERVICE_CHECKS))})", steps + ("x-check",))
            continue
        if name not in VALUE_CHECKS:
            raise SchemaError(f"{where}.x-check: unknown check {name!r} (known: "
                              f"{', '.join(sorted(VALUE_CHECKS))})", steps + ("x-check",))
        if kinds and not kinds & VALUE_KINDS[name]:
            raise SchemaError(f"{where}.x-check: {name!r} judges "
                              f"{' or '.join(sorted(VALUE_KINDS[name]))} values, "
                              f"not {' or '.join(sorted(kinds))}", steps + ("x-check",))
    if "format" in schema and schema["format"] not in FORMATS:
        raise SchemaError(f"{where}.format: {schema['format']!r} is not one of "
                          f"{', '.join(sorted(FORMATS))}", steps + ("format",))
    if "x-form" in schema and not isinstance(schema["x-form"], bool):
        raise SchemaError(f"{where}.x-form must be true or false", steps + ("x-form",))
    if "x-input" in schema and schema["x-input"] not in INPUTS:
        raise SchemaError(f"{where}.x-input must be one of {', '.join(sorted(INPUTS))}",
                          steps + ("x-input",))
    for text in ("title", "description"):
        if text in schema and not str(schema[text]).strip():
            raise SchemaError(f"{where}.{text} must not be empty", steps + (text,))
    for name, sub in (schema.get("properties") or {}).items():
        _subset(f"{where}.properties.{name}", sub, steps + ("properties", name))
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            _subset(f"{where}.{key}", schema[key], steps + (key,))


# -- the specs of a catalog ---------------------------------------------------------

def resolve(types: Mapping[str, Any], ancestry: Any) -> dict[str, TypeSpec]:
    """The :class:`TypeSpec` of every concrete type of a catalog.

    ``types`` maps names to entries with ``schema`` and ``abstract``;
    ``ancestry(name)`` is the type and its ancestors, nearest first.  A
    catalog without any schema (the operations of an older data folder)
    gives none; one with schemas must give one to every concrete type.
    """
    for name, info in types.items():
        if info.schema is not None:
            try:
                check_schema(f"type {name!r}: schema", info.schema)
            except SchemaError as exc:
                exc.type_name = name
                raise
    if not any(info.schema is not None for info in types.values()):
        return {}
    specs = {}
    for name, info in types.items():
        if info.abstract:
            continue
        chain = list(reversed(ancestry(name)))        # farthest first
        own = [types[t].schema for t in chain if types[t].schema is not None]
        if not own:
            raise SchemaError(f"type {name!r}: no schema along its 'extends' (the API "
                              f"could not create its services)")
        specs[name] = _spec(name, own)
    return specs


def _spec(name: str, schemas: list[dict[str, Any]]) -> TypeSpec:
    where = f"type {name!r}: schema"
    merged: dict[str, Any] = {}
    for schema in schemas:
        merged = merge(merged, schema)
    properties = merged.get("properties") or {}
    units = properties.get(UNITS)
    if not isinstance(units, dict) or units.get("type") != "array" or not isinstance(
            units.get("items"), dict):
        raise SchemaError(f"{where}.properties.units must be an array schema with 'items' "
                          f"(a unit object)")
    unit_schema = units["items"]
    service_fields = _fields(f"{where}", merged, skip=(UNITS,))
    unit_fields = _fields(f"{where}.properties.units.items", unit_schema)
    base = schemas[0]
    base_props = base.get("properties") or {}
    base_units = (base_props.get(UNITS) or {}).get("items") or {}
    inherited = len(schemas) > 1      # else the type declares every field itself
    common = set(base_props) if inherited else set()
    common_units = set(base_units.get("properties") or {}) if inherited else set()
    min_units = units.get("minItems", 1)
    if min_units < 1:
        raise SchemaError(f"{where}.properties.units.minItems must be at least 1")
    secrets: set[str] = set()
    for spec in (*service_fields.values(), *unit_fields.values()):
        if spec.secret:
            secrets.add(spec.name)
        secret_names(spec.schema, secrets)
    return TypeSpec(
        name=name, schema=merged,
        fields=tuple(f for n, f in service_fields.items() if n not in common),
        unit_fields=tuple(f for n, f in unit_fields.items() if n not in common_units),
        all_fields=service_fields, all_unit_fields=unit_fields,
        min_units=min_units, max_units=units.get("maxItems"),
        checks=tuple(_names(merged.get("x-check", []))),
        doc=str(merged.get("description") or merged.get("title") or ""),
        secrets=frozenset(secrets))


def secret_names(schema: Any, found: set[str]) -> set[str]:
    """Add to ``found`` the names of the properties ``schema`` declares secret
    (``writeOnly``) inside it, at any depth: an object field's own properties,
    its ``additionalProperties``, a list's ``items``."""
    if not isinstance(schema, Mapping):
        return found
    properties = schema.get("properties")
    for name, sub in (properties.items() if isinstance(properties, Mapping) else ()):
        if isinstance(sub, Mapping) and sub.get("writeOnly") is True:
            found.add(name)
        secret_names(sub, found)
    for keyword in ("items", "additionalProperties"):
        secret_names(schema.get(keyword), found)
    return found


def _fields(where: str, schema: Mapping[str, Any],
            skip: Iterable[str] = ()) -> dict[str, FieldSpec]:
    properties = schema.get("properties") or {}
    required = schema.get("required") or []
    missing = [n for n in required if n not in properties]
    if missing:
        raise SchemaError(f"{where}.required: {', '.join(missing)} not in its properties")
    return {n: FieldSpec(n, sub, n in required) for n, sub in properties.items()
            if n not in skip}
