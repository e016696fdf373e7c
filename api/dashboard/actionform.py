"""The forms of lifecycle actions (heal, scale, execute_operation, check, ...).

The parameters are those :mod:`fornace.common.actionparams` checks; the form
offers the environment's own services, units, types and operations as
choices, so a user picks rather than pastes ids.  Errors come back from the
API's check (``action scale: parameter 'delta' ...``) and are shown at the
parameter they name.  An action that removes what runs (uninstall, a scale
in, heal) is first shown on a confirmation page naming what goes
(:func:`confirmation`); its form posts the same values again, confirmed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from fornace.api.dashboard.serviceform import InvalidInput, json_value
from fornace.api.stores.jobs import USER_ACTIONS
from fornace.common import contract
from fornace.common.actionparams import ActionError, check_parameters
from fornace.common.catalog import Catalog
from fornace.common.modelview import find_service, service_type, units_of

GENERAL = "_form"
CONFIRMED = "confirmed"     # the field of a confirmation page's form

LABELS = {
    "change_detection": "Deployed units",
    "node_instance_id": "Unit",
    "node_id": "Service",
    "delta": "Units to add",
    "scale_compute": "Create or delete the instances",
    "operation": "Operation",
    "operation_kwargs": "Extra inputs",
    "allow_kwargs_override": "Extra inputs may replace the catalog's",
    "run_by_dependency_order": "In dependency order",
    "type_names": "Only these service types",
    "node_ids": "Only these services",
    "node_instance_ids": "Only these units",
}

DESCRIPTIONS = {
    "check": "Ask every unit how it is, without changing anything; the units' status "
             "and node state are updated.",
    "heal": "Rebuild one unit: its instance is recreated and its software installed again.",
    "scale": "Add units to a service (or remove some with a negative delta).",
    "execute_operation": "Run one operation of the service types' catalog on the "
                         "selected units.",
    "install": "Install what is not installed yet (a deploy of the stored description).",
    "uninstall": "Remove the software and instances, keeping the environment.",
    "plan": "Show what a deploy would do, without doing it.",
}


@dataclass
class Param:
    """One parameter input: ``widget`` is number, checkbox, choice, multi, text or json."""

    name: str
    widget: str
    doc: str
    required: bool = False
    value: Any = ""
    options: list[tuple[str, str]] = field(default_factory=list)
    error: str | None = None
    label: str = ""

    def __post_init__(self) -> None:
        self.label = self.label or LABELS.get(self.name, self.name)


def _services(model: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in model.get("services") or [] if isinstance(s, dict) and s.get("id")]


def _unit_options(model: dict[str, Any]) -> list[tuple[str, str]]:
    options = []
    for service in _services(model):
        for unit in service.get("units") or []:
            if isinstance(unit, dict) and unit.get("id"):
                state = unit.get("state") if isinstance(unit.get("state"), dict) else {}
                host = f" ({state['hostname']})" if state.get("hostname") else ""
                options.append((str(unit["id"]),
                                f"{service.get('name') or service['id']} / "
                                f"{unit.get('name') or unit['id']}{host}"))
    return options


def _service_options(model: dict[str, Any]) -> list[tuple[str, str]]:
    return [(str(s["id"]), f"{s.get('name') or s['id']} ({service_type(s)})")
            for s in _services(model)]


def _type_options(model: dict[str, Any]) -> list[tuple[str, str]]:
    names = sorted({service_type(s) for s in _services(model)} - {""})
    return [(name, name) for name in names]


def _operation_options(model: dict[str, Any], catalog: Catalog) -> list[tuple[str, str]]:
    names: set[str] = set()
    for type_name, _ in _type_options(model):
        if catalog.known(type_name):
            names.update(catalog.operation_names(type_name))
    return [(name, name) for name in sorted(names)]


def _choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(value, value) for value in values]


def params_of(action: str, model: dict[str, Any], catalog: Catalog) -> list[Param]:
    """The inputs of ``action`` on an environment of ``model``, with their defaults."""
    if action in ("install", "plan"):
        return [Param("change_detection", "choice",
                      "reconfigure deployed units whose configuration changed (evaluate), "
                      "all of them (always) or none (skip)", value="evaluate",
                      options=_choices(contract.CHANGE_DETECTION))]
    if action == "heal":
        return [Param("node_instance_id", "choice", "the unit to rebuild", True,
                      options=_unit_options(model))]
    if action == "scale":
        return [Param("node_id", "choice", "the service to scale", True,
                      options=_service_options(model)),
                Param("delta", "number", "units to add (negative: to remove)", value="1"),
                Param("scale_compute", "checkbox", "create or remove the units' instances too",
                      value=True)]
    if action == "execute_operation":
        return _operation_params(model, catalog)
    return []


def _operation_params(model: dict[str, Any], catalog: Catalog) -> list[Param]:
    operations = _operation_options(model, catalog)
    return [
        Param("operation", "choice" if operations else "text", "the operation to run",
              True, options=operations),
        Param("operation_kwargs", "json", "extra inputs of the operation (a JSON object)",
              value="{}"),
        Param("allow_kwargs_override", "choice",
              "whether the extra inputs may replace the catalog's",
              options=[("true", "true"), ("false", "false")]),
        Param("run_by_dependency_order", "checkbox",
              "run service by service in dependency order", value=False),
        Param("type_names", "multi", "only units of these types (none: all)",
              options=_type_options(model), value=[]),
        Param("node_ids", "multi", "only units of these services (none: all)",
              options=_service_options(model), value=[]),
        Param("node_instance_ids", "multi", "only these units (none: all)",
              options=_unit_options(model), value=[]),
    ]


def read_params(action: str, form: Any, model: dict[str, Any],
                catalog: Catalog) -> tuple[dict[str, Any], list[Param], dict[str, str]]:
    """The submitted parameters, the inputs showing them, and the input errors."""
    params = params_of(action, model, catalog)
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for param in params:
        param.value = _shown(param, form)
        try:
            value = _value(param, form)
        except InvalidInput as exc:
            errors[param.name] = str(exc)
            continue
        if value is not None and value != []:
            values[param.name] = value
    return values, params, errors


def _shown(param: Param, form: Any) -> Any:
    """What the input shows again when the form comes back with an error."""
    if param.widget == "multi":
        return form.getlist(param.name)
    if param.widget == "checkbox":
        return form.get(param.name) == "true"
    return form.get(param.name)


def _value(param: Param, form: Any) -> Any:
    if param.widget == "checkbox":
        return form.get(param.name) == "true"
    if param.widget == "multi":
        return [v for v in form.getlist(param.name) if v]
    text = form.get(param.name).strip()
    if not text:
        return None
    if param.widget == "number":
        if not re.fullmatch(r"[+-]?\d{1,9}", text):
            raise InvalidInput("must be a whole number")
        return int(text)
    if param.widget == "json":
        return json_value(text)
    if param.name == "allow_kwargs_override":
        return text == "true"
    return text


def error_param(message: str, params: list[Param]) -> str:
    """The input an API error message is about (``parameter 'x'``), or :data:`GENERAL`."""
    found = re.search(r"parameter '([^']+)'", message)
    names = {p.name for p in params}
    if found and found.group(1) in names:
        return found.group(1)
    if "operation_kwargs" in message and "operation_kwargs" in names:
        return "operation_kwargs"
    return GENERAL


def known(action: str) -> bool:
    return action in USER_ACTIONS


def actions() -> list[tuple[str, str]]:
    """(action, what it does) of every action users can run."""
    return [(name, DESCRIPTIONS.get(name, "")) for name in USER_ACTIONS]


# -- confirming what removes things ---------------------------------------------------------

@dataclass
class Confirmation:
    """What a destructive action would do, shown before it runs."""

    title: str
    lines: list[str]
    button: str


def _unit_name(unit: dict[str, Any]) -> str:
    state = unit.get("state") if isinstance(unit.get("state"), dict) else {}
    name = str(unit.get("name") or unit.get("id"))
    return f"{name} ({state['hostname']})" if state.get("hostname") else name


def _protected(unit: dict[str, Any]) -> bool:
    status = unit.get("status")
    return isinstance(status, dict) and bool(status.get("protected"))


def confirmation(action: str, values: dict[str, Any], model: dict[str, Any],
                 catalog: Catalog) -> Confirmation | None:
    """What running ``action`` with ``values`` removes, to confirm first; None
    when it removes nothing (or its parameters are wrong: the job's own check
    then says so at the field)."""
    if action not in ("uninstall", "heal", "scale"):
        return None
    try:
        checked = check_parameters(action, values, model, catalog)
    except ActionError:
        return None
    services = _services(model)
    if action == "uninstall":
        lines = [f"{s.get('name') or s['id']} ({service_type(s)}): "
                 f"{len(units_of(s))} unit(s)" for s in services]
        return Confirmation("Uninstall every service?",
                            ["The software and the instances of these services are "
                             "removed; the environment and its description are kept "
                             "(a deploy installs them again):", *lines], "Uninstall")
    if action == "heal":
        unit_id = checked["node_instance_id"]
        for service in services:
            for unit in units_of(service):
                if str(unit.get("id")) == unit_id:
                    return Confirmation(f"Rebuild unit {_unit_name(unit)}?", [
                        f"The instance of unit {_unit_name(unit)} of service "
                        f"{service.get('name') or service['id']} is deleted and created "
                        f"again, and its software installed again: what is stored on it "
                        f"is lost."], "Rebuild the unit")
        return None
    delta = checked["delta"]
    if delta >= 0:
        return None
    service = find_service(model, checked["node_id"])
    if service is None:
        return None
    units = units_of(service)
    leaving = [u for u in reversed(units) if not _protected(u)][:-delta]
    name = service.get("name") or service["id"]
    return Confirmation(f"Remove {-delta} unit(s) of {name}?", [
        f"Service {name} goes from {len(units)} to {len(units) + delta} unit(s). "
        f"The newest units that are not protected are removed and their instances "
        f"deleted:",
        *(_unit_name(u) for u in leaving)], f"Remove {-delta} unit(s)")


def resubmitted(params: list[Param]) -> list[tuple[str, str]]:
    """The (name, value) pairs that post ``params`` as they were submitted (the
    hidden inputs of a confirmation page)."""
    pairs: list[tuple[str, str]] = []
    for param in params:
        if param.widget == "multi":
            pairs.extend((param.name, str(v)) for v in param.value or [])
        elif param.widget == "checkbox":
            if param.value:
                pairs.append((param.name, "true"))
        elif param.value not in (None, ""):
            pairs.append((param.name, str(param.value)))
    return pairs
