"""Reading services and units out of an object model.

Lifecycle actions, the topology, change detection and job recording all walk
the same model, which comes from users and 0.2 workflows and so may hold
anything: these helpers skip what is not a service or a unit with an id.
"""
from __future__ import annotations

from typing import Any, Iterator

from fornace.common.cursor import get_path


def services_of(model: dict[str, Any]) -> list[dict[str, Any]]:
    """The services (a list, or an object as in a deletion task) that have an id."""
    services = model.get("services")
    if isinstance(services, dict):
        services = list(services.values())
    if not isinstance(services, list):
        return []
    return [s for s in services if isinstance(s, dict) and s.get("id") is not None]


def units_of(service: dict[str, Any]) -> list[dict[str, Any]]:
    """The units of a service that have an id."""
    units = service.get("units")
    if not isinstance(units, list):
        return []
    return [u for u in units if isinstance(u, dict) and u.get("id") is not None]


def iter_units(model: dict[str, Any]) -> Iterator[tuple[dict, dict]]:
    """(service, unit) for every unit of the model."""
    for service in services_of(model):
        for unit in units_of(service):
            yield service, unit


def service_type(service: dict[str, Any]) -> str:
    """A service's type: ``type``, or Murano's ``?: {type}``."""
    value = service.get("type")
    if isinstance(value, str):
        return value
    murano = service.get("?")
    return str(murano.get("type")) if isinstance(murano, dict) else ""


def find_service(model: dict[str, Any], service_id: Any) -> dict[str, Any] | None:
    return next((s for s in services_of(model) if str(s["id"]) == str(service_id)), None)


def find_unit(model: dict[str, Any], unit_id: Any) -> dict[str, Any] | None:
    return next((u for _, u in iter_units(model) if str(u["id"]) == str(unit_id)), None)


def find_object(model: dict[str, Any], object_id: Any) -> dict[str, Any] | None:
    """The service or unit with this id."""
    return find_service(model, object_id) or find_unit(model, object_id)


def unit_labels(unit: dict[str, Any]) -> frozenset[str]:
    """The names a unit goes by: its id, name and hostname."""
    names = {str(unit["id"])}
    for value in (unit.get("name"), get_path(unit, "state.hostname")):
        if isinstance(value, str):
            names.add(value)
    return frozenset(names)


def hostname_of(unit: dict[str, Any] | None) -> str | None:
    """A unit's hostname (its name before it has one)."""
    if unit is None:
        return None
    state = unit.get("state")
    value = (state.get("hostname") if isinstance(state, dict) else None) or unit.get("name")
    return str(value) if value is not None else None
