"""An environment's ``defaultNetworks``: the networks its instances would join.

Later Murano clients send it when an environment is created with
``--join-net-id NET`` / ``--join-subnet-id SUBNET``::

    {"name": "web", "region": null, "defaultNetworks": {
        "environment": {"?": {"id": "...", "type": "io.murano.resources.ExistingNeutronNetwork"},
                        "internalNetworkName": "NET", "internalSubnetworkName": "SUBNET"},
        "flat": null}}

Fornace keeps it, checked, at the top of the environment's object model
(``/defaultNetworks``), where workflows and ``model show`` read it and
``model edit`` changes it.  The workflows of the catalog do not use it yet:
their instances join the network the conductor's stack template gives them.

:func:`networks_problem` says what is wrong with one (the path of the field
first, as every 400 of the API names it); :func:`prepared_networks` gives a
checked copy whose network objects have an id in their ``"?"`` header (a new
one when none was given, as every object of the model gets one).
"""
from __future__ import annotations

import copy
import uuid
from typing import Any

from fornace.common import names
from fornace.common.namedchecks import describe

FIELD = "defaultNetworks"
SLOTS = ("environment", "flat")
"""What ``defaultNetworks`` holds: the environment's own network, and Murano's
"flat" one (each a network object, or null)."""

_TEXT_FIELDS = ("name", "internalNetworkName", "internalSubnetworkName", "externalRouterId",
                "subnetCidr", "openstackId", "regionName")
"""A network's fields holding a name or an id (Neutron's, a CIDR): a name's rule."""
_FLAGS = ("autoUplink", "autogenerateSubnet")
_HEADER_KEYS = ("id", "type", "name")
MAX_NAME_SERVERS = 16


def networks_problem(value: Any) -> tuple[str, str] | None:
    """None when ``value`` can be an environment's ``defaultNetworks``, else
    (the field's path, what is wrong)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return FIELD, (f"must be an object such as {{\"environment\": {{...}}, \"flat\": null}}, "
                       f"not {describe(value)}")
    for key in value:
        if key not in SLOTS:
            return f"{FIELD}.{_shown(key)}", "not permitted (defaultNetworks holds "\
                                             "'environment' and 'flat')"
    for slot in SLOTS:
        problem = _network_problem(value.get(slot), f"{FIELD}.{slot}")
        if problem is not None:
            return problem
    return None


def _network_problem(network: Any, where: str) -> tuple[str, str] | None:
    if network is None:
        return None
    if not isinstance(network, dict):
        return where, f"must be a network object or null, not {describe(network)}"
    known = ("?", *_TEXT_FIELDS, *_FLAGS, "dnsNameServers")
    for key, field in network.items():
        path = f"{where}.{_shown(key)}"
        if key not in known:
            return path, f"not permitted (a network has {', '.join(known)})"
        if key == "?":
            problem = _header_problem(field, path)
        elif key in _FLAGS:
            problem = None if isinstance(field, bool) else (
                path, f"must be a boolean, not {describe(field)}")
        elif key == "dnsNameServers":
            problem = _name_servers_problem(field, path)
        else:
            text = names.name_problem(field)
            problem = None if text is None else (path, text)
        if problem is not None:
            return problem
    return None


def _header_problem(header: Any, where: str) -> tuple[str, str] | None:
    if not isinstance(header, dict):
        return where, (f"must be an object such as {{\"id\": ..., \"type\": ...}} (Murano's "
                       f"object header), not {describe(header)}")
    for key, field in header.items():
        path = f"{where}.{_shown(key)}"
        if key not in _HEADER_KEYS:
            return path, f"not permitted (a header has {', '.join(_HEADER_KEYS)})"
        if field is None:
            continue
        problem = names.id_problem(field) if key == "id" else names.name_problem(field)
        if problem is not None:
            return path, problem
    return None


def _name_servers_problem(servers: Any, where: str) -> tuple[str, str] | None:
    if not isinstance(servers, list):
        return where, f"must be a list of addresses, not {describe(servers)}"
    if len(servers) > MAX_NAME_SERVERS:
        return where, f"at most {MAX_NAME_SERVERS} name servers (got {len(servers)})"
    for index, server in enumerate(servers):
        problem = names.name_problem(server)
        if problem is not None:
            return f"{where}[{index}]", problem
    return None


def _shown(key: str) -> str:
    """A key as an error shows it: at most 64 characters of it."""
    return key if len(key) <= 64 else f"{key[:64]}..."


def prepared_networks(value: dict[str, Any]) -> dict[str, Any]:
    """A copy of a checked ``defaultNetworks`` (:func:`networks_problem` found
    nothing wrong) with both slots present and an id in each network's header."""
    prepared = {slot: copy.deepcopy(value.get(slot)) for slot in SLOTS}
    for network in prepared.values():
        if isinstance(network, dict):
            header = network.get("?")
            header = dict(header) if isinstance(header, dict) else {}
            if header.get("id") is None:
                header["id"] = uuid.uuid4().hex
            network["?"] = header
    return prepared
