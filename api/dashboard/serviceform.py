"""The add/edit service form, generated from the service type's :class:`TypeSpec`.

Each field of the spec becomes an input chosen by its kind (text, password,
number, a true/false choice, JSON for lists and objects); the units are a
count, plus a JSON list of per-unit settings for types whose units have
fields of their own.  A submitted form becomes a service object that
:mod:`fornace.api.specs` validates, and a :class:`~fornace.api.specs.SpecError` is shown
next to the input its ``field`` path names.

Passwords are never written into the page: a stored one shows as ``***``
(sent back, the API keeps the stored value), a typed one is not echoed.
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

from fornace.api import specs
from fornace.api.routing import parse_json
from fornace.common.secrets import MASK, is_secret_key

HIDDEN = ("id", "type", "created", "updated")   # owned by the server, not edited
UNITS = "units"                  # the unit count input
UNIT_SETTINGS = "unit_settings"  # per-unit fields, JSON
GENERAL = "_form"                # errors not about one input
MAX_UNITS = 100


@dataclass
class Field:
    """One input of the form."""

    name: str
    widget: str          # text, password, number, checkbox, choice, json, text_or_json
    required: bool
    doc: str
    value: str = ""
    error: str | None = None


@dataclass
class ServiceForm:
    """A form of one service type: its inputs, the units' inputs and general errors."""

    type_name: str
    doc: str
    fields: list[Field]
    units: Field
    unit_settings: Field | None
    errors: dict[str, str]

    @property
    def general_error(self) -> str | None:
        return self.errors.get(GENERAL)


def type_choices() -> list[tuple[str, str]]:
    """(type name, what it is) of every registered service type."""
    return [(name, spec.doc) for name, spec in sorted(specs.SERVICE_TYPES.items())]


def spec_of(type_name: str) -> specs.TypeSpec | None:
    return specs.SERVICE_TYPES.get(type_name)


# -- from the spec to inputs -----------------------------------------------------------

def _widget(field: specs.FieldSpec) -> str:
    kinds = field.kinds
    if kinds == ("str",):
        return "password" if is_secret_key(field.name) else "text"
    if kinds == ("int",):
        return "number"
    if kinds == ("bool",):
        return "checkbox" if field.required else "choice"
    if set(kinds) == {"str", "object"}:
        return "text_or_json"
    return "json"


def _ordered(spec: specs.TypeSpec) -> list[specs.FieldSpec]:
    """The name first, then the type's own fields, then the common ones."""
    fields = spec.service_fields()
    own = [f.name for f in spec.fields]
    order = ["name", *own, *fields]
    seen: set[str] = set()
    result = []
    for name in order:
        if name in fields and name not in seen and name not in HIDDEN:
            seen.add(name)
            result.append(fields[name])
    return result


def _shown(widget: str, value: Any) -> str:
    """A stored value as the text of its input."""
    if value is None:
        return ""
    if widget == "password":
        return MASK if value else ""  # a page never holds a password
    if widget in ("checkbox", "choice"):
        return "true" if value is True else "false" if value is False else ""
    if widget == "json" or (widget == "text_or_json" and not isinstance(value, str)):
        return json.dumps(value, indent=2, ensure_ascii=False)
    return str(value)


def build_form(spec: specs.TypeSpec, service: dict[str, Any] | None = None,
               errors: dict[str, str] | None = None) -> ServiceForm:
    """The form of ``spec``, filled from a (masked) stored or submitted service."""
    service = service or {}
    errors = errors or {}
    fields = []
    for field in _ordered(spec):
        widget = _widget(field)
        value = _shown(widget, service.get(field.name))
        fields.append(Field(field.name, widget, field.required, field.doc, value,
                            errors.get(field.name)))
    units = service.get("units") if isinstance(service.get("units"), list) else None
    count = len(units) if units is not None else spec.min_units
    units_field = Field(UNITS, "number", True, _units_doc(spec), str(count), errors.get(UNITS))
    settings = None
    if spec.unit_fields:
        settings = Field(UNIT_SETTINGS, "json", False, _settings_doc(spec),
                         _settings_text(spec, units, count), errors.get(UNIT_SETTINGS))
    return ServiceForm(spec.name, spec.doc, fields, units_field, settings, errors)


def _units_doc(spec: specs.TypeSpec) -> str:
    most = f", at most {spec.max_units}" if spec.max_units else ""
    return f"how many instances (at least {spec.min_units}{most})"


def _settings_doc(spec: specs.TypeSpec) -> str:
    names = ", ".join(f"{f.name}{'' if f.required else ' (optional)'}" for f in spec.unit_fields)
    return f"a JSON list, one object per unit, with: {names}"


def _settings_text(spec: specs.TypeSpec, units: list | None, count: int) -> str:
    """The units' own fields (or an example for a new service), as JSON."""
    own = list(spec.unit_fields)
    if units is None:
        example = {f.name: _example(f) for f in own if f.required}
        return _json_list([dict(example) for _ in range(count)])
    shown = []
    for unit in units:
        unit = unit if isinstance(unit, dict) else {}
        shown.append({f.name: (MASK if is_secret_key(f.name) and unit.get(f.name)
                               else unit.get(f.name)) for f in own if f.name in unit})
    return _json_list(shown)


def _json_list(items: list[dict[str, Any]]) -> str:
    """A JSON list with one item a line: easy to read and edit in a textarea."""
    lines = ",\n".join("  " + json.dumps(item, ensure_ascii=False) for item in items)
    return f"[\n{lines}\n]" if items else "[]"


def _example(field: specs.FieldSpec) -> Any:
    return {"bool": False, "int": 0, "list": [], "object": {}}.get(field.kinds[0], "")


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
            raise InvalidInput("must be a whole number")
        return int(stripped)
    if widget == "json" or (widget == "text_or_json" and stripped[:1] in ("{", "[")):
        if not stripped:
            return None
        return json_value(stripped)
    return text if stripped else None


def json_value(text: str) -> Any:
    """JSON typed in a textarea, read as strictly as the API reads a body."""
    try:
        return parse_json(text.encode("utf-8"))
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise InvalidInput(f"is not valid JSON: {getattr(exc, 'msg', exc)}") from None


def read_service(spec: specs.TypeSpec, form: Any, stored: dict[str, Any] | None = None,
                 ) -> tuple[dict[str, Any], dict[str, str]]:
    """The service object a submitted form describes, and the input errors found.

    ``stored`` (the masked stored service, when editing) keeps what the form
    does not show: ids, unit names and states, fields of other tools.
    """
    service: dict[str, Any] = copy.deepcopy(stored) if stored else {}
    service["type"] = spec.name
    errors: dict[str, str] = {}
    for field in _ordered(spec):
        widget = _widget(field)
        try:
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
        errors[UNITS] = "must be a whole number of units"
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
    shown = {f.name for f in _ordered(spec)}
    return top if top in shown else GENERAL


def spec_errors(spec: specs.TypeSpec, error: specs.SpecError) -> dict[str, str]:
    """``{input: message}`` for one :class:`SpecError`; the message keeps the
    path when it names a part of the input (``units[1].isMaster: ...``)."""
    where = error_input(spec, error)
    message = error.message if where == error.field else f"{error.field}: {error.message}"
    return {where: message}


def for_redisplay(spec: specs.TypeSpec, service: dict[str, Any],
                  stored: dict[str, Any] | None) -> dict[str, Any]:
    """A submitted service to show again after an error, without the passwords
    typed in it: a stored password shows as ``***`` (kept if sent back), a new
    one must be typed again -- a page never holds a password."""
    shown = copy.deepcopy(service)
    _drop_typed(shown, stored if isinstance(stored, dict) else {})
    stored_units = {u.get("id"): u for u in (stored or {}).get("units") or []
                    if isinstance(u, dict) and u.get("id") is not None}
    for unit in shown.get("units") or []:
        if isinstance(unit, dict):
            _drop_typed(unit, stored_units.get(unit.get("id"), {}))
    return shown


def _drop_typed(obj: dict[str, Any], stored: dict[str, Any]) -> None:
    for key in [k for k in obj if is_secret_key(k)]:
        if obj[key] in (None, MASK):
            continue
        if stored.get(key) is not None:
            obj[key] = MASK
        else:
            obj[key] = ""
