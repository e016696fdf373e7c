"""The parameters of lifecycle actions: checked, with defaults, and what they select.

The API checks a job's parameters before it queues the job (a mistake is a
400 naming the parameter, not a failed job an hour later); the conductor
checks them again and uses :func:`select_units` to find the units an
``execute_operation`` job runs on.  The parameters follow Cloudify's built-in
workflows (``heal``, ``scale``, ``execute_operation``) and Unfurl's
``--change-detection`` job option, on Fornace's model: a service is a node,
a unit a node instance.

Pure functions over the object model and the type catalog.
"""
from __future__ import annotations

from typing import Any, Callable

from fornace.common import contract, names
from fornace.common.catalog import Catalog, Operation, render, unit_cursor
from fornace.common.errors import FornaceError
from fornace.common.modelview import find_service, service_type, services_of, units_of

Units = list[tuple[dict[str, Any], dict[str, Any]]]


class ActionError(FornaceError):
    """Parameters a lifecycle action cannot run with; the message names the parameter."""


# -- the model ----------------------------------------------------------------------

def _unit_ids(model: dict[str, Any]) -> set[str]:
    return {u["id"] for s in services_of(model) for u in units_of(s)}


def _label(service: dict[str, Any]) -> str:
    name = service.get("name")
    return f"{name} ({service['id']})" if name and name != service["id"] else str(service["id"])


# -- the checks of one value -----------------------------------------------------------

class _Param:
    """Where a value comes from, for the error messages."""

    def __init__(self, action: str, name: str) -> None:
        self.action = action
        self.name = name

    def error(self, message: str) -> ActionError:
        return ActionError(f"action {self.action}: parameter {self.name!r} {message}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _boolean(param: _Param, value: Any, nullable: bool = False) -> bool | None:
    if isinstance(value, bool) or (nullable and value is None):
        return value
    expected = "true, false or null" if nullable else "true or false"
    raise param.error(f"must be {expected}, got {_kind(value)}")


def _integer(param: _Param, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise param.error(f"must be an integer, got {_kind(value)}")


def _text(param: _Param, value: Any) -> str:
    if not isinstance(value, str):
        raise param.error(f"must be a string, got {_kind(value)}")
    if not value.strip():
        raise param.error("must not be empty")
    return value


def _strings(param: _Param, value: Any) -> list[str]:
    if not isinstance(value, list):
        raise param.error(f"must be a list of strings, got {_kind(value)}")
    for item in value:
        if not isinstance(item, str):
            raise param.error(f"must be a list of strings, got {_kind(item)} in it")
    return list(value)


def _member(param: _Param, value: str, known: set[str] | tuple[str, ...], what: str) -> str:
    if value not in known:
        raise param.error(f"names no {what}: {_shown(value)}")
    return value


# -- the actions -----------------------------------------------------------------------

Scope = tuple[dict[str, Any], Catalog]   # (model, catalog) a value is checked against
Check = Callable[[_Param, Any, Scope], Any]
_REQUIRED = object()


def _change_detection(param: _Param, value: Any, _ctx: Scope) -> str:
    if value not in contract.CHANGE_DETECTION:
        raise param.error(f"must be one of {', '.join(contract.CHANGE_DETECTION)}, "
                          f"got {_shown(value)}")
    return value


def _unit_id(param: _Param, value: Any, ctx: Scope) -> str:
    return _member(param, _text(param, value), _unit_ids(ctx[0]), "unit of the environment")


def _service_id(param: _Param, value: Any, ctx: Scope) -> str:
    ids = {s["id"] for s in services_of(ctx[0])}
    return _member(param, _text(param, value), ids, "service of the environment")


def _type_names(param: _Param, value: Any, ctx: Scope) -> list[str]:
    catalog = ctx[1]
    return [_member(param, name, set(catalog.types), "service type of the catalog")
            for name in _strings(param, value)]


def _service_ids(param: _Param, value: Any, ctx: Scope) -> list[str]:
    return [_service_id(param, item, ctx) for item in _strings(param, value)]


def _unit_id_list(param: _Param, value: Any, ctx: Scope) -> list[str]:
    return [_unit_id(param, item, ctx) for item in _strings(param, value)]


def _object(param: _Param, value: Any, _ctx: Scope) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise param.error(f"must be an object, got {_kind(value)}")
    return value


def _flag(param: _Param, value: Any, _ctx: Scope) -> bool:
    return bool(_boolean(param, value))


def _flag_or_null(param: _Param, value: Any, _ctx: Scope) -> bool | None:
    return _boolean(param, value, nullable=True)


def _delta(param: _Param, value: Any, _ctx: Scope) -> int:
    return _integer(param, value)


def _operation(param: _Param, value: Any, _ctx: Scope) -> str:
    return _text(param, value)


# action -> parameter -> (check, default); _REQUIRED marks a parameter without default
_SPECS: dict[str, dict[str, tuple[Check, Any]]] = {
    "deploy": {"change_detection": (_change_detection, "evaluate")},
    "install": {"change_detection": (_change_detection, "evaluate")},
    "plan": {"change_detection": (_change_detection, "evaluate")},
    "delete": {},
    "uninstall": {},
    "check": {},
    "heal": {"node_instance_id": (_unit_id, _REQUIRED)},
    "scale": {"node_id": (_service_id, _REQUIRED),
              "delta": (_delta, 1),
              "scale_compute": (_flag, True)},
    "execute_operation": {
        "operation": (_operation, _REQUIRED),
        "operation_kwargs": (_object, {}),
        "allow_kwargs_override": (_flag_or_null, None),
        "run_by_dependency_order": (_flag, False),
        "type_names": (_type_names, []),
        "node_ids": (_service_ids, []),
        "node_instance_ids": (_unit_id_list, []),
    },
}


def check_parameters(action: str, parameters: Any, model: dict[str, Any],
                     catalog: Catalog) -> dict[str, Any]:
    """``parameters`` of ``action`` checked against the environment's model and
    the catalog, with every default filled in; :class:`ActionError` names the
    first wrong parameter."""
    if action not in _SPECS:
        raise ActionError(f"unknown action {_shown(action)} "
                          f"(known: {', '.join(contract.ACTIONS)})")
    if not isinstance(parameters, dict):
        raise ActionError(f"action {action}: the parameters must be an object, "
                          f"got {_kind(parameters)}")
    spec = _SPECS[action]
    unknown = sorted(set(parameters) - set(spec))
    if unknown:
        known = ", ".join(spec) or "none"
        raise ActionError(f"action {action}: unknown parameter {_shown(unknown[0])} "
                          f"(it takes: {known})")
    normalized: dict[str, Any] = {}
    for name, (check, default) in spec.items():
        param = _Param(action, name)
        if name in parameters:
            _refuse_nul(param, parameters[name])
            normalized[name] = check(param, parameters[name], (model, catalog))
        elif default is _REQUIRED:
            raise param.error("is required")
        else:
            normalized[name] = default if not isinstance(default, (dict, list)) \
                else type(default)()
    if action == "scale":
        _check_scale(normalized, model)
    return normalized


def _refuse_nul(param: _Param, value: Any) -> None:
    """A NUL (U+0000) anywhere in a parameter's value (strings and keys) is an
    error: the database's text columns refuse it, and reports may quote it."""
    if any("\x00" in text for _path, text, _key in names.texts(value)):
        raise param.error("must not contain NUL (U+0000)")


def _check_scale(parameters: dict[str, Any], model: dict[str, Any]) -> None:
    """A scale in must leave the service at least one unit."""
    service = find_service(model, parameters["node_id"])
    assert service is not None  # checked by _service_id
    count = len(units_of(service))
    if count + parameters["delta"] < 1:
        raise _Param("scale", "delta").error(
            f"would leave service {_label(service)} with {count + parameters['delta']} "
            f"unit(s): it has {count} and must keep at least 1")


# -- what an execute_operation job runs on ----------------------------------------------

def select_units(parameters: dict[str, Any], model: dict[str, Any],
                 catalog: Catalog) -> Units:
    """The (service, unit) pairs that pass every filter of ``parameters``
    (``node_ids``, ``node_instance_ids``, ``type_names``; an empty or missing
    filter lets everything through), in model order.

    As in Cloudify, a selected unit whose type lacks ``operation`` is an
    error, not a silent skip: narrow the selection with the filters.
    """
    node_ids = set(parameters.get("node_ids") or ())
    unit_ids = set(parameters.get("node_instance_ids") or ())
    type_names = list(parameters.get("type_names") or ())
    operation = parameters.get("operation")
    selected: Units = []
    for service in services_of(model):
        type_name = service_type(service)
        if node_ids and service["id"] not in node_ids:
            continue
        if type_names and not any(catalog.is_a(type_name, base) for base in type_names):
            continue
        for unit in units_of(service):
            if unit_ids and unit["id"] not in unit_ids:
                continue
            if operation is not None:
                _require_operation(catalog, service, type_name, operation)
                found = catalog.operation(type_name, operation)
                if found is not None:
                    operation_mappings(found, model, service, unit,
                                       parameters.get("operation_kwargs"),
                                       parameters.get("allow_kwargs_override"))
            selected.append((service, unit))
    return selected


def operation_mappings(operation: Operation, model: dict[str, Any], service: dict[str, Any],
                       unit: dict[str, Any], kwargs: dict[str, Any] | None = None,
                       allow_override: bool | None = None) -> dict[str, Any]:
    """The mappings of ``operation`` on ``unit``: its catalog inputs evaluated at
    the unit, then ``kwargs``.  A kwarg may replace an input the catalog gives a
    value only with ``allow_override`` (Cloudify's allow_kwargs_override)."""
    cursor = unit_cursor(model, str(service["id"]), str(unit["id"]))
    if cursor is None:
        raise ActionError(f"unit {unit.get('id')} is not in the environment")
    mappings = render(operation.inputs, cursor)
    for key, value in (kwargs or {}).items():
        if mappings.get(key) is not None and not allow_override:
            raise ActionError(
                f"action execute_operation: operation_kwargs would override the input "
                f"{_shown(key)} of operation {_shown(operation.name)} on service "
                f"{_label(service)}; set allow_kwargs_override to true to allow it")
        mappings[key] = value
    return mappings


def _require_operation(catalog: Catalog, service: dict[str, Any], type_name: str,
                       operation: str) -> None:
    if catalog.has_operation(type_name, operation):
        return
    if not catalog.known(type_name):
        raise ActionError(f"action execute_operation: service {_label(service)} has type "
                          f"{_shown(type_name)}, which the catalog does not know, so it has no "
                          f"operation {_shown(operation)}")
    has = ", ".join(catalog.operation_names(type_name)) or "none"
    raise ActionError(f"action execute_operation: service {_label(service)} of type "
                      f"{type_name!r} has no operation {_shown(operation)} (it has: {has}); "
                      f"narrow the selection with type_names, node_ids or node_instance_ids")
