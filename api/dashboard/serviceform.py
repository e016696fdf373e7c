"""The add/edit service form, generated from the service type's schema
(a :class:`TypeSpec` of the catalog, :mod:`fornace.common.typeschema`).

Each field of the schema becomes an input chosen by its JSON type (text,
password for a ``writeOnly`` field, number, a true/false choice, JSON for
lists and objects, and for a name-or-object field whose object's properties
are declared (``osImage``) one text input per key: the declared ones (the
image's name), then those of its default or stored object (its type) --
never raw JSON to edit), labelled and explained by its ``title`` and
``description`` (:mod:`fornace.api.dashboard.fieldinfo`); its ``default``
fills a new service's form, and ``x-form: false`` leaves out the fields a
type's workflows do not use (no Windows fields on Linux types).  ``dependsOn`` is a
choice among the environment's other services.  The units are a count, plus
a JSON list of per-unit settings for types whose units have fields of their
own.

A submitted form becomes a service object; every problem is found at once --
inputs that are not of their kind, then each field checked by
:mod:`fornace.api.specs` on its own, then the units -- and shown next to its
input, with what the user typed kept.  The whole-service check of
:mod:`fornace.api.specs` has the last word once the fields are right.

Passwords are never written into the page: a stored one shows as ``***``
(sent back, the API keeps the stored value), a typed one is not echoed.
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field as dataclass_field
from typing import Any, Callable, Iterable

from fornace.api import specs
from fornace.api.dashboard.fieldinfo import FieldInfo, field_info
from fornace.api.errors import ApiError
from fornace.api.routing import parse_json
from fornace.api.validationbudget import ValidationBudget
from fornace.common.catalog import Catalog
from fornace.common.secrets import MASK, is_secret_key

HIDDEN = ("id", "type", "created", "updated")   # owned by the server, not edited
UNITS = "units"                  # the unit count input
UNIT_SETTINGS = "unit_settings"  # per-unit fields, JSON
GENERAL = "_form"                # errors not about one input
MAX_UNITS = 100


@dataclass(frozen=True)
class ServiceChoice:
    """Another service of the environment, offered by a ``services`` input."""

    id: str
    name: str
    type: str


@dataclass
class Field:
    """One input of the form.  ``value`` is the input's text; for a
    ``services`` input, the list of chosen ids."""

    name: str
    widget: str          # text, password, number, checkbox, choice, json, text_or_json, parts,
    #                      services
    required: bool
    label: str
    doc: str
    value: Any = ""
    error: str | None = None
    options: list[tuple[str, str]] = dataclass_field(default_factory=list)
    parts: list["Part"] = dataclass_field(default_factory=list)


@dataclass(frozen=True)
class Part:
    """One key of a ``parts`` input (``osImage``'s ``name``): its input is named
    ``<field>.<key>``."""

    key: str
    label: str
    doc: str
    value: str
    required: bool


@dataclass
class ServiceForm:
    """A form of one service type: its inputs, the units' inputs and general errors."""

    type_name: str
    doc: str
    fields: list[Field]
    units: Field
    unit_settings: Field | None
    errors: dict[str, str]
    unit_names: tuple[str, ...] = ()   # the fields of the unit settings
    unit_secrets: tuple[str, ...] = ()  # those of them that are secrets

    @property
    def general_error(self) -> str | None:
        return self.errors.get(GENERAL)

    @property
    def inputs(self) -> list[Field]:
        """Every input, in the page's order."""
        return [*self.fields, self.units, *([self.unit_settings] if self.unit_settings else [])]

    @property
    def has_passwords(self) -> bool:
        """Whether the form has password inputs (or unit settings holding some)."""
        return any(f.widget == "password" for f in self.fields) or bool(self.unit_secrets)


def type_choices(catalog: Catalog | None = None) -> list[tuple[str, str]]:
    """(type name, what it is) of every service type of the API's catalog."""
    return [(name, spec.doc) for name, spec in sorted(specs.service_types(catalog).items())]


def spec_of(type_name: str, catalog: Catalog | None = None) -> specs.TypeSpec | None:
    return specs.service_types(catalog).get(type_name)


def is_secret(field: specs.FieldSpec) -> bool:
    """Declared secret by its schema (``writeOnly``), or named like a password."""
    return field.secret or is_secret_key(field.name)


# -- from the spec to inputs -----------------------------------------------------------

def info(spec: specs.TypeSpec, field: specs.FieldSpec) -> FieldInfo:
    """What the schema of ``spec`` says of one of its service fields."""
    return field_info(field)


def _widget(field: specs.FieldSpec, about: FieldInfo) -> str:
    kinds = field.kinds
    if about.input == "services":
        return "services"
    if kinds == ("string",):
        return "password" if is_secret(field) else "text"
    if kinds == ("integer",):
        return "number"
    if kinds == ("boolean",):
        return "checkbox" if field.required else "choice"
    if set(kinds) == {"string", "object"}:
        return "parts" if _declared(field) else "text_or_json"
    return "json"


def _declared(field: specs.FieldSpec) -> dict[str, Any]:
    """The declared properties of an object field's schema (empty: none)."""
    properties = field.schema.get("properties")
    return dict(properties) if isinstance(properties, dict) else {}


def _part_keys(field: specs.FieldSpec, *values: Any) -> list[str]:
    """The keys a ``parts`` input offers: the declared ones, then those of
    ``values`` (the default, the stored object), in that order."""
    keys = list(_declared(field))
    for value in values:
        if isinstance(value, dict):
            keys.extend(str(k) for k in value if str(k) not in keys)
    return keys


def _main_key(field: specs.FieldSpec) -> str:
    """The key a plain text value of a ``parts`` field stands for (an
    ``osImage`` given as ``"debian-12"`` is its name): the first required
    declared key, else the first declared one."""
    declared = list(_declared(field))
    required = [k for k in field.schema.get("required") or [] if k in declared]
    return (required or declared)[0]


def _parts(field: specs.FieldSpec, value: Any, default: Any = None) -> list[Part]:
    """The inputs of a ``parts`` field showing ``value`` (a stored object, a
    plain name, or the typed texts by key)."""
    if isinstance(value, str) and value.strip()[:1] == "{":   # sent as JSON, shown again
        try:
            value = json_value(value.strip())
        except InvalidInput:
            pass
    if isinstance(value, str):
        value = {_main_key(field): value}
    declared = _declared(field)
    required = set(field.schema.get("required") or [])
    parts = []
    for key in _part_keys(field, default, value):
        schema = declared.get(key) if isinstance(declared.get(key), dict) else {}
        item = value.get(key) if isinstance(value, dict) else None
        text = "" if item is None else item if isinstance(item, str) else json.dumps(
            item, ensure_ascii=False)
        parts.append(Part(key, str(schema.get("title") or key.capitalize()),
                          str(schema.get("description") or ""), text, key in required))
    return parts


def _typed_parts(field: specs.FieldSpec, form: Any, stored: Any) -> dict[str, str] | None:
    """The texts typed in a ``parts`` field's inputs, by key (None: the form
    has none of them -- it sent the field as one value, JSON or a name)."""
    default = field_info(field).default
    keys = _part_keys(field, default, stored)
    if not any(f"{field.name}.{key}" in form for key in keys):
        return None
    return {key: form.get(f"{field.name}.{key}") for key in keys}


def shown_fields(spec: specs.TypeSpec) -> list[tuple[specs.FieldSpec, FieldInfo]]:
    """The fields the form offers, with what the catalog says of them: the name
    first, then the type's own fields, then the common ones; never the
    server's (``id``, ``type``, ...) nor those the catalog leaves out."""
    fields = spec.service_fields()
    order = ["name", *(f.name for f in spec.fields), *fields]
    seen: set[str] = set()
    result = []
    for name in order:
        if name in fields and name not in seen and name not in HIDDEN:
            seen.add(name)
            about = info(spec, fields[name])
            if about.shown or fields[name].required:  # a required field is always offered
                result.append((fields[name], about))
    return result


def _shown(widget: str, value: Any) -> Any:
    """A stored value as the text of its input (a list of ids for ``services``)."""
    if widget == "services":
        return [str(v) for v in value] if isinstance(value, list) else []
    if value is None:
        return ""
    if widget == "password":
        return MASK if value else ""  # a page never holds a password
    if widget in ("checkbox", "choice"):
        return "true" if value is True else "false" if value is False else ""
    if widget == "parts":
        return copy.deepcopy(value)     # its inputs are made by _parts
    if widget == "json" or (widget == "text_or_json" and not isinstance(value, str)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _options(chosen: list[str], others: Iterable[ServiceChoice]) -> list[tuple[str, str]]:
    """The services to choose among; a chosen id that is not one of them (a
    service removed since) stays offered, chosen, so that it can be unchosen."""
    options = [(o.id, f"{o.name} ({o.type})") for o in others]
    known = {value for value, _ in options}
    options.extend((value, f"{value} (not a service of this environment)")
                   for value in chosen if value not in known)
    return options


def _form(spec: specs.TypeSpec, values: dict[str, Any], errors: dict[str, str],
          others: Iterable[ServiceChoice], units_text: str,
          settings_text: str | None) -> ServiceForm:
    others = list(others)
    fields = []
    for field, about in shown_fields(spec):
        widget = _widget(field, about)
        value = values.get(field.name, [] if widget == "services" else "")
        parts = _parts(field, value, about.default) if widget == "parts" else []
        fields.append(Field(field.name, widget, field.required, about.label, about.help,
                            "" if parts else value, errors.get(field.name),
                            _options(value, others) if widget == "services" else [],
                            parts))
    units_field = Field(UNITS, "number", True, "Number of units", _units_doc(spec),
                        units_text, errors.get(UNITS))
    settings = None
    if spec.unit_fields:
        settings = Field(UNIT_SETTINGS, "json", False, "Unit settings", _settings_doc(spec),
                         settings_text or "", errors.get(UNIT_SETTINGS))
    return ServiceForm(spec.name, spec.doc, fields, units_field, settings, errors,
                       tuple(f.name for f in spec.unit_fields),
                       tuple(f.name for f in spec.unit_fields if is_secret(f)))


def new_form(spec: specs.TypeSpec, others: Iterable[ServiceChoice] = ()) -> ServiceForm:
    """The form of a new service of ``spec``, with the catalog's defaults."""
    values = {}
    for field, about in shown_fields(spec):
        if about.default is not None:
            values[field.name] = _shown(_widget(field, about), about.default)
    count = spec.min_units
    return _form(spec, values, {}, others, str(count), _settings_text(spec, None, count))


def stored_form(spec: specs.TypeSpec, service: dict[str, Any],
                others: Iterable[ServiceChoice] = ()) -> ServiceForm:
    """The form of a (masked) stored service."""
    values = {field.name: _shown(_widget(field, about), service.get(field.name))
              for field, about in shown_fields(spec)}
    units = service.get("units") if isinstance(service.get("units"), list) else None
    count = len(units) if units is not None else spec.min_units
    return _form(spec, values, {}, others, str(count), _settings_text(spec, units, count))


def submitted_form(spec: specs.TypeSpec, form: Any, stored: dict[str, Any] | None,
                   errors: dict[str, str], others: Iterable[ServiceChoice] = ()) -> ServiceForm:
    """The form shown again with its errors: what the user typed, as typed --
    except passwords: a page never holds a password, so where one is stored
    the input shows ``***`` (kept if sent back) and a new one must be typed
    again."""
    stored = stored if isinstance(stored, dict) else {}
    values: dict[str, Any] = {}
    for field, about in shown_fields(spec):
        widget = _widget(field, about)
        if widget == "services":
            values[field.name] = [v for v in form.getlist(field.name) if v]
        elif widget == "password":
            values[field.name] = MASK if stored.get(field.name) is not None else ""
        elif widget == "parts":
            typed = _typed_parts(field, form, stored.get(field.name))
            values[field.name] = form.get(field.name) if typed is None else typed
        else:
            values[field.name] = form.get(field.name)
    settings_text = None
    if spec.unit_fields:
        settings_text, problem = _settings_again(spec, form.get(UNIT_SETTINGS), stored)
        if problem and UNIT_SETTINGS in errors:
            errors = {**errors, UNIT_SETTINGS: f"{errors[UNIT_SETTINGS]} ({problem})"}
    return _form(spec, values, errors, others, form.get(UNITS), settings_text)


def _settings_again(spec: specs.TypeSpec, text: str,
                    stored: dict[str, Any]) -> tuple[str, str | None]:
    """The unit settings typed, to show again; without the passwords typed in
    them (and not at all when they cannot be read to find those)."""
    if not any(is_secret(f) for f in spec.unit_fields):
        return text, None
    try:
        settings = parse_json(text.strip().encode("utf-8")) if text.strip() else []
    except ValueError:
        return "", "not shown again: it may hold passwords"
    if not isinstance(settings, list):
        return "", "not shown again: it may hold passwords"
    stored_units = [u for u in stored.get("units") or [] if isinstance(u, dict)]
    shown = []
    for index, unit in enumerate(settings):
        if isinstance(unit, dict):
            unit = dict(unit)
            _drop_typed(unit, stored_units[index] if index < len(stored_units) else {},
                        {f.name for f in spec.unit_fields if is_secret(f)})
        shown.append(unit)
    return _json_list(shown), None


def _units_doc(spec: specs.TypeSpec) -> str:
    most = f", at most {spec.max_units}" if spec.max_units else ""
    return f"How many instances (at least {spec.min_units}{most})."


def _settings_doc(spec: specs.TypeSpec) -> str:
    parts = []
    for f in spec.unit_fields:
        about = field_info(f)
        optional = "" if f.required else ", optional"
        parts.append(f"{f.name} ({about.label}{optional}: {about.help})")
    return "A JSON list, one object per unit, with: " + "; ".join(parts)


def _settings_text(spec: specs.TypeSpec, units: list | None, count: int) -> str:
    """The units' own fields (or an example for a new service), as JSON."""
    own = list(spec.unit_fields)
    if units is None:
        example = {f.name: _example(f) for f in own if f.required}
        return _json_list([dict(example) for _ in range(count)])
    shown = []
    for unit in units:
        unit = unit if isinstance(unit, dict) else {}
        shown.append({f.name: (MASK if is_secret(f) and unit.get(f.name)
                               else unit.get(f.name)) for f in own if f.name in unit})
    return _json_list(shown)


def _json_list(items: list[Any]) -> str:
    """A JSON list with one item a line: easy to read and edit in a textarea."""
    lines = ",\n".join("  " + json.dumps(item, ensure_ascii=False) for item in items)
    return f"[\n{lines}\n]" if items else "[]"


def _example(field: specs.FieldSpec) -> Any:
    kind = field.kinds[0] if field.kinds else "string"
    return {"boolean": False, "integer": 0, "number": 0, "array": [], "object": {}}.get(kind, "")


# -- from the submitted form to a service ----------------------------------------------

class InvalidInput(ValueError):
    """A value that is not of its input's kind (shown at the input)."""


def _parsed(widget: str, text: str) -> Any:
    """The value of one input; ``None`` for an empty optional input (left out)."""
    if widget == "checkbox":
        return text == "true"
    stripped = text.strip()
    if widget == "choice":
        return {"true": True, "false": False}.get(stripped)
    if widget == "password":
        return text if text else None
    if widget == "number":
        if not stripped:
            return None
        if not re.fullmatch(r"[+-]?\d{1,18}", stripped):
            raise InvalidInput(f"must be a whole number (got {_quoted(stripped)})")
        return int(stripped)
    if widget == "json" or (widget == "text_or_json" and stripped[:1] in ("{", "[")):
        if not stripped:
            return None
        return json_value(stripped)
    return text if stripped else None


def _parts_value(field: specs.FieldSpec, form: Any, stored: Any) -> Any:
    """The object a ``parts`` field's inputs make (its empty keys left out;
    None when all are empty); sent as one value instead, read as JSON or a name."""
    typed = _typed_parts(field, form, stored)
    if typed is None:
        return _parsed("text_or_json", form.get(field.name))
    value = {key: text.strip() for key, text in typed.items() if text.strip()}
    return value or None


def _quoted(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit - 1] + "…")


def json_value(text: str) -> Any:
    """JSON typed in a textarea, read as strictly as the API reads a body."""
    try:
        return parse_json(text.encode("utf-8"))
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise InvalidInput(f"is not valid JSON: {getattr(exc, 'msg', exc)}") from None


def _chosen(form: Any, name: str, others: Iterable[ServiceChoice]) -> list[str] | None:
    """The ids chosen in a ``services`` input (None: none chosen)."""
    chosen = [v for v in form.getlist(name) if v]
    known = {o.id for o in others}
    unknown = [v for v in chosen if v not in known]
    if unknown:
        raise InvalidInput(f"{_quoted(unknown[0])} is not another service of this "
                           f"environment: unselect it")
    return chosen or None


def read_service(spec: specs.TypeSpec, form: Any, stored: dict[str, Any] | None = None,
                 others: Iterable[ServiceChoice] = (),
                 ) -> tuple[dict[str, Any], dict[str, str]]:
    """The service object a submitted form describes, and the input errors found.

    ``stored`` (the masked stored service, when editing) keeps what the form
    does not show: ids, unit names and states, fields the form leaves out and
    fields of other tools.
    """
    others = list(others)
    service: dict[str, Any] = copy.deepcopy(stored) if stored else {}
    service["type"] = spec.name
    errors: dict[str, str] = {}
    for field, about in shown_fields(spec):
        widget = _widget(field, about)
        try:
            if widget == "services":
                value = _chosen(form, field.name, others)
            elif widget == "parts":
                value = _parts_value(field, form, service.get(field.name))
            else:
                value = _parsed(widget, form.get(field.name))
        except InvalidInput as exc:
            errors[field.name] = str(exc)
            continue
        if value is None and not (field.required and widget == "text"):
            service.pop(field.name, None)
        else:
            service[field.name] = "" if value is None else value
    units = _units(spec, form, service.get("units"), errors)
    if units is not None:
        service["units"] = units
    return service, errors


def _units(spec: specs.TypeSpec, form: Any, stored: Any,
           errors: dict[str, str]) -> list[dict[str, Any]] | None:
    text = form.get(UNITS).strip()
    if not re.fullmatch(r"\d{1,4}", text):
        errors[UNITS] = f"must be a whole number of units (got {_quoted(text)})"
        return None
    count = int(text)
    if count > MAX_UNITS:
        errors[UNITS] = f"at most {MAX_UNITS} units from the dashboard"
        return None
    existing = [u for u in stored if isinstance(u, dict)] if isinstance(stored, list) else []
    units = [copy.deepcopy(existing[i]) if i < len(existing) else {} for i in range(count)]
    if spec.unit_fields:
        _apply_settings(spec, form.get(UNIT_SETTINGS), units, errors)
    return units


def _apply_settings(spec: specs.TypeSpec, text: str, units: list[dict[str, Any]],
                    errors: dict[str, str]) -> None:
    if not text.strip():
        return
    try:
        settings = json_value(text.strip())
    except InvalidInput as exc:
        errors[UNIT_SETTINGS] = str(exc)
        return
    if not isinstance(settings, list) or not all(isinstance(s, dict) for s in settings):
        errors[UNIT_SETTINGS] = "must be a JSON list of objects, one per unit"
        return
    if len(settings) > len(units):
        errors[UNIT_SETTINGS] = (f"has settings for {len(settings)} units but the service "
                                 f"has {len(units)}: change the number of units too")
        return
    own = {f.name for f in spec.unit_fields}
    for unit, values in zip(units, settings):
        for name in own:
            unit.pop(name, None)
        unit.update(values)


# -- every problem at once -----------------------------------------------------------------

def _field_problem(field: specs.FieldSpec, obj: dict[str, Any], path: str,
                   budget: ValidationBudget) -> specs.SpecError | None:
    """The problem :mod:`fornace.api.specs` finds with one field of ``obj`` on its
    own (required, kind, emptiness, the field's check), or None; the fields of
    one form share ``budget``."""
    if field.name not in obj or (obj[field.name] is None and not field.required):
        return specs.SpecError(path, "required") if field.required else None
    try:
        specs.check_value(field.schema, obj[field.name], path, budget,  # the validator's own
                          secret=is_secret(field))
    except specs.SpecError as exc:
        return exc
    return None


def problems(spec: specs.TypeSpec, service: dict[str, Any], check: Callable[[Any], None],
             known: dict[str, str]) -> dict[str, str]:
    """``{input: message}`` of every problem of ``service`` besides the input
    errors ``known``: each field on its own, the number of units and each
    unit's own fields; when none, the whole-service ``check``
    (``specs.validate_create`` or ``validate_update``: cross-field rules,
    unknown fields, duplicate ids).  The work of the fields' checks together is
    bounded as one validation's (:class:`ValidationBudget`)."""
    found: dict[str, str] = {}
    budget = ValidationBudget()
    fields = spec.service_fields()
    for field, _ in shown_fields(spec):
        if field.name in known:
            continue
        problem = _field_problem(fields[field.name], service, field.name, budget)
        if problem is not None:
            found.update(spec_errors(spec, problem))
    if UNITS not in known and isinstance(service.get("units"), list):
        _unit_problems(spec, service["units"], known, found, budget)
    if not found and not known:
        try:
            check(service)
        except specs.SpecError as exc:
            found.update(spec_errors(spec, exc))
    return found


def _unit_problems(spec: specs.TypeSpec, units: list[Any], known: dict[str, str],
                   found: dict[str, str], budget: ValidationBudget) -> None:
    count = len(units)
    if count < spec.min_units:
        need = "at least one unit" if spec.min_units == 1 else f"at least {spec.min_units} units"
        found[UNITS] = f"a {spec.name} service needs {need} (got {count})"
    elif spec.max_units is not None and count > spec.max_units:
        found[UNITS] = f"a {spec.name} service takes at most {spec.max_units} units (got {count})"
    if UNIT_SETTINGS in known or not spec.unit_fields:
        return
    for index, unit in enumerate(units):
        for field in spec.unit_fields:
            problem = _field_problem(field, unit, f"units[{index}].{field.name}", budget)
            if problem is not None:
                found.setdefault(UNIT_SETTINGS, f"{problem.field}: {problem.message}")
                return


def error_input(spec: specs.TypeSpec, error: specs.SpecError) -> str:
    """The input a :class:`SpecError` is about (its ``field`` path, e.g.
    ``units[1].isMaster`` or ``osImage.name``), or :data:`GENERAL`."""
    path = error.field
    if path == UNITS or path.startswith(UNITS + "["):
        inner = path.split(".", 1)[1] if "." in path else ""
        if spec.unit_fields and inner:
            return UNIT_SETTINGS
        return UNITS
    top = re.split(r"[.\[]", path, maxsplit=1)[0]
    shown = {f.name for f, _ in shown_fields(spec)}
    return top if top in shown else GENERAL


def api_error_input(error: ApiError) -> str:
    """The input the Store's refusal of a service is about: ``name`` for a
    name another service of the environment has, else :data:`GENERAL`."""
    if "existing" in error.details or re.match(r"services\[\d+\]\.name: ", error.message):
        return "name"
    return GENERAL


def spec_errors(spec: specs.TypeSpec, error: specs.SpecError) -> dict[str, str]:
    """``{input: message}`` for one :class:`SpecError`; the message keeps the
    path when it names a part of the input (``units[1].isMaster: ...``)."""
    where = error_input(spec, error)
    message = error.message if where == error.field else f"{error.field}: {error.message}"
    return {where: message}


def _drop_typed(obj: dict[str, Any], stored: dict[str, Any], secrets: set[str]) -> None:
    for key in [k for k in obj if is_secret_key(k) or k in secrets]:
        if obj[key] in (None, MASK):
            continue
        if stored.get(key) is not None:
            obj[key] = MASK
        else:
            obj[key] = ""
