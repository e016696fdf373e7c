"""What an edit of a session's services must not break: ``dependsOn`` lists
naming services that are there, service names unique in the environment, and
each service still valid after an edit below it (:mod:`fornace.api.specs`).

Each check compares the services before and after the change, so that wrong
ones from before (a 0.2 description, say) do not block other edits.
"""
from __future__ import annotations

from typing import Any, Callable

from fornace.api import specs, tree
from fornace.api.errors import BadRequest, Conflict
from fornace.common import topology
from fornace.common.catalog import Catalog


def dangling_dependencies(services: list) -> set[str]:
    """What is wrong with the services' ``dependsOn`` lists (not a list, or naming
    no service of the environment), as the topology words it."""
    return {p for p in topology.build({"services": services}).problems if "dependsOn" in p}


def forget_dependency(services: list, service_id: str) -> None:
    """A service removed: the others' ``dependsOn`` no longer name it (the
    dashboard's confirmation names those that did)."""
    for service in services:
        depends = service.get("dependsOn") if isinstance(service, dict) else None
        if isinstance(depends, list) and service_id in map(str, depends):
            service["dependsOn"] = [d for d in depends if str(d) != service_id]


def refuse_new_dangling_dependencies(before: set[str], services: list) -> None:
    """A 400 when an edit made a ``dependsOn`` wrong: naming a service that is not
    there.  Wrong ones from before (a 0.2 description, say) do not block other
    edits."""
    new = sorted(dangling_dependencies(services) - before)
    if new:
        raise BadRequest("; ".join(new) + " (dependsOn lists the ids of services of the "
                         "same environment)")


def duplicate_ids(services: list) -> dict[str, str]:
    """Id -> the path of its second holder, for each id two services or units of
    ``services`` share (the workflow engine tells objects apart by id)."""
    seen: set[str] = set()
    twice: dict[str, str] = {}
    for index, service in enumerate(services):
        if not isinstance(service, dict):
            continue
        units = service.get("units")
        holders = [(f"services[{index}].id", service)] + [
            (f"services[{index}].units[{number}].id", unit)
            for number, unit in enumerate(units if isinstance(units, list) else [])
            if isinstance(unit, dict)]
        for path, holder in holders:
            value = holder.get("id")
            if not isinstance(value, str):
                continue
            if value in seen:
                twice.setdefault(value, path)
            seen.add(value)
    return twice


def refuse_new_duplicate_ids(before: dict[str, str], services: list) -> None:
    """A 400 when an edit gave two services or units one id (a list PUT whose
    entries, or whose ``"?"`` headers, repeat one); ids shared before the edit
    (a 0.2 description, say) do not block other edits."""
    new = {value: path for value, path in duplicate_ids(services).items() if value not in before}
    if new:
        value, path = next(iter(new.items()))
        raise BadRequest(f"{path}: id {value!r} is already used in this environment "
                         f"(ids are unique among its services and units)", field=path)


def service_names(services: list) -> dict[str, Any]:
    """Service id -> name, of a session's services (to tell, after a change,
    which services it added or renamed)."""
    return {service["id"]: service.get("name") for service in services
            if isinstance(service, dict) and isinstance(service.get("id"), str)}


def refuse_taken_service_names(before: dict[str, Any], services: list) -> None:
    """No service a change added or renamed may share its name with another.

    With a service that was there before the change (``before``:
    :func:`service_names`): a 409 naming that service and its id.  Between
    services of the change itself (a list put at once): a 400 naming both
    places.  Services that had one name before the change are left alone.
    """
    places: dict[str, list[int]] = {}
    for index, service in enumerate(services):
        if isinstance(service, dict) and isinstance(service.get("name"), str):
            places.setdefault(service["name"], []).append(index)
    for name, indexes in places.items():
        if len(indexes) < 2:
            continue
        changed = [i for i in indexes if _renamed(services[i], before)]
        if not changed:
            continue
        kept = [i for i in indexes if i not in changed]
        if kept:
            existing = services[kept[0]].get("id")
            raise Conflict(f"a service named {name!r} (id {existing}) exists already in "
                           f"this environment", existing={"id": existing, "name": name})
        raise BadRequest(f"services[{changed[1]}].name: duplicate name {name!r} (also "
                         f"services[{changed[0]}])", field=f"services[{changed[1]}].name")


def _renamed(service: dict, before: dict[str, Any]) -> bool:
    """Whether a change added ``service`` or changed its name."""
    service_id = service.get("id")
    return (not isinstance(service_id, str) or service_id not in before
            or before[service_id] != service.get("name"))


def add_services(services: list, items: list, now: str | None,
                 catalog: Catalog | None = None) -> list:
    """Append a list of create specs to a session's ``services``, all or nothing:
    the first entry that is wrong is a 400 naming it and its field
    (``services[1].units[0].isMaster: must be a boolean``), as is a name two
    entries share.  The prepared services, in order."""
    if not items:
        raise BadRequest("services: the list is empty: nothing to add")
    names: dict[str, int] = {}
    added = []
    for index, item in enumerate(items):
        try:
            specs.validate_create(item, catalog)
            service = specs.prepare_new(item, now, services)
        except specs.SpecError as exc:
            raise entry_error(index, exc) from None
        name = service.get("name")
        if isinstance(name, str):
            if name in names:
                raise BadRequest(f"services[{index}].name: duplicate name {name!r} (also "
                                 f"services[{names[name]}])", field=f"services[{index}].name")
            names[name] = index
        services.append(service)
        added.append(service)
    return added


def entry_error(index: int, exc: specs.SpecError) -> BadRequest:
    """The 400 of a problem of the ``index``-th service of a list: its path
    (``services[1].units[0].id``) first in the message and as ``field``."""
    place = f"services[{index}]"
    field = place if exc.field == "service" else f"{place}.{exc.field}"
    return BadRequest(f"{field}: {exc.message}", field=field)


def checked(check: Callable, *args: Any, index: int | None = None) -> Any:
    """``check(*args)``, a :class:`~fornace.api.specs.SpecError` as a 400 naming
    the field (``field``; of the ``index``-th entry of a list when given)."""
    try:
        return check(*args)
    except specs.SpecError as exc:
        if index is not None:
            raise entry_error(index, exc) from None
        raise BadRequest(str(exc), field=exc.field) from None


def revalidate(services: list, segments: list[str], now: str | None,
               catalog: Catalog | None = None) -> None:
    """After an edit below a service, the service must still be valid."""
    service = tree.top_service(services, segments)
    if isinstance(service, dict):
        checked(specs.validate_update, service, catalog)
        prepared = checked(specs.prepare_units, service)
        prepared["updated"] = now
        index = next(i for i, item in enumerate(services) if item is service)
        services[index] = prepared


def checked_services(services: list, old: Any, now: str | None,
                     catalog: Catalog | None = None) -> list:
    """The services an edit of the whole model left, taken as a ``PUT`` of the
    whole list takes them: masked secrets (``***``) restored from ``old``,
    each service that is new or changed checked (a 400 naming it and its
    field) and given the ids it lacks (its units too), ``updated`` (and a new
    one's ``created``) set to ``now``.  Services left as they were are not
    checked again: wrong ones from before (a 0.2 description) do not block."""
    old = old if isinstance(old, list) else []
    before = {service["id"]: service for service in old
              if isinstance(service, dict) and isinstance(service.get("id"), str)}
    result = []
    for index, service in enumerate(specs.keep_secrets(services, old, catalog)):
        known = before.get(service.get("id")) if isinstance(service, dict) else None
        if known is not None and known == service:
            result.append(service)
            continue
        checked(specs.validate_update, service, catalog, index=index)
        prepared = checked(specs.prepare_units, service, index=index)
        if prepared["id"] not in before:
            prepared["created"] = now
        prepared["updated"] = now
        result.append(prepared)
    return result
