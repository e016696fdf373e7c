"""What a deployed environment offers: its services' and units' endpoints.

Read from the description the conductor returns: a unit's ``state``
holds its ``hostname`` and ``address`` (every workflow that creates an
instance sets them) and, for services that serve something, its ``url``;
a service's ``state`` holds the ``url`` and ``address`` of what stands in
front of its units (a farm's load balancer).  Nothing is guessed: a
service type whose workflows set no ``url`` shows addresses only.  While a
job runs, what it has sent of them so far (contract 1.15) is shown over
the model it started from.
"""
from __future__ import annotations

from typing import Any

from fornace.common.contract import NODE_ENDPOINTS
from fornace.common.modelview import services_of, units_of


def _text(state: dict[str, Any], key: str) -> str | None:
    value = state.get(key)
    return str(value) if isinstance(value, (str, int, float)) and value != "" else None


def _state(obj: dict[str, Any]) -> dict[str, Any]:
    state = obj.get("state")
    return state if isinstance(state, dict) else {}


Live = dict[str, dict[str, Any]]   # node id -> what a running job sent of it


def endpoints(obj: dict[str, Any], live: Live | None = None) -> dict[str, str | None]:
    """A unit's or service's ``hostname``, ``address`` and ``url`` (None when
    unknown); ``live``: the node states a running job sent (contract 1.15),
    newer than the model it started from."""
    state = _state(obj)
    found = {key: _text(state, key) for key in NODE_ENDPOINTS}
    sent = (live or {}).get(str(obj.get("id")))
    if isinstance(sent, dict):
        found.update({key: text for key in NODE_ENDPOINTS
                      if (text := _text(sent, key)) is not None})
    return found


def environment_outputs(model: dict[str, Any], live: Live | None = None) -> dict[str, Any]:
    """``{"environment": {id, name}, "services": [{id, name, type, url, address,
    units: [{id, name, hostname, address, url}]}], "urls": [{service, unit, url}]}``
    (``urls``: every URL in the order of the services, a service's before its units');
    ``live``: as :func:`endpoints` takes it."""
    services, urls = [], []
    for service in services_of(model):
        found = endpoints(service, live)
        name = str(service.get("name") or service["id"])
        entry = {"id": str(service["id"]), "name": name,
                 "type": service.get("type") if isinstance(service.get("type"), str) else None,
                 "url": found["url"], "address": found["address"], "units": []}
        if entry["url"]:
            urls.append({"service": name, "unit": None, "url": entry["url"]})
        for unit in units_of(service):
            unit_entry = {"id": str(unit["id"]), "name": str(unit.get("name") or unit["id"]),
                          **endpoints(unit, live)}
            entry["units"].append(unit_entry)
            if unit_entry["url"]:
                urls.append({"service": name, "unit": unit_entry["name"], "url": unit_entry["url"]})
        services.append(entry)
    return {"environment": {"id": model.get("id"), "name": model.get("name")},
            "services": services, "urls": urls}
