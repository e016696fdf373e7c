"""``fornace status``, ``fornace topology`` and ``fornace outputs``: how an
environment's units are, in which order they are deployed, and where what
they serve is reached."""
from __future__ import annotations

import argparse
from typing import Any

from fornace.cli.client.common import OK, add_command, dispatch, find_environment
from fornace.cli.client.http import ApiClient
from fornace.cli.client.formats import add_format_option, emit, format_of, print_table


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    status = add_command(
        subparsers, "status", "show the status of each service and unit",
        "Per service and unit: local status (ok, degraded, error, absent, pending, "
        "unknown; 'fornace action ENV check' refreshes it) and node state (initial, "
        "creating, configured, started, error...), and the job running now.",
        ["fornace status demo", "fornace status demo --json",
         "fornace status demo -f value | cut -f3,4"])
    status.add_argument("environment", metavar="ENV", help="environment id or name")
    add_format_option(status)
    topology = add_command(
        subparsers, "topology", "show the dependency order of the services",
        "The services and their units, the dependencies between services (dependsOn or "
        "a reference such as a domain) and the levels they are deployed in: a level "
        "waits for the levels before it. A row per service: level, name, type, units, "
        "what it depends on (and why).",
        ["fornace topology demo", "fornace topology demo --json"])
    topology.add_argument("environment", metavar="ENV", help="environment id or name")
    add_format_option(topology)
    outputs = add_command(
        subparsers, "outputs", "show where the services and units are reached",
        "The endpoints of the deployed environment: per service the URL and address of "
        "what stands in front of its units (a farm's load balancer), per unit its "
        "hostname, address and URL. A service type whose workflows set no URL shows "
        "addresses only.",
        ["fornace outputs demo", "fornace outputs demo -f value | cut -f5 | grep .",
         "fornace outputs demo --json"])
    outputs.add_argument("environment", metavar="ENV", help="environment id or name")
    add_format_option(outputs)


def run(conf: Any) -> int:
    return dispatch(conf.command, {"status": status, "topology": topology,
                                   "outputs": outputs})


def status(command: Any, client: ApiClient) -> int:
    format_of(command)
    env = find_environment(client, command.environment)
    data = client.get(f"/environments/{env['id']}/status")
    rows = []
    for service in data["services"]:
        rows.append((service["name"], service["type"], None, _local(service), _state(service)))
        rows.extend((service["name"], None, unit["name"], _local(unit), _state(unit))
                    for unit in service["units"])

    def show() -> None:
        print(f"environment {env['name']}: {data['state']}, version {data['version']}"
              + (f", job {data['job']} running" if data.get("job") else ""))
        print_table(("SERVICE", "TYPE", "UNIT", "STATUS", "STATE"), rows,
                    empty="(no services)")
    emit(command, data, rows, show)
    return OK


def _local(item: dict[str, Any]) -> str:
    return str((item.get("status") or {}).get("local") or "-")


def _state(item: dict[str, Any]) -> str:
    return str((item.get("status") or {}).get("state") or "-")


def topology(command: Any, client: ApiClient) -> int:
    format_of(command)
    env = find_environment(client, command.environment)
    data = client.get(f"/environments/{env['id']}/topology")
    rows = topology_rows(data)

    def show() -> None:
        print_table(("LEVEL", "SERVICE", "TYPE", "UNITS", "DEPENDS ON"), rows,
                    empty="(no services)")
        for problem in data["problems"]:
            print(f"problem: {problem}")
    emit(command, data, rows, show)
    return OK


def topology_rows(data: dict[str, Any]) -> list[tuple[Any, ...]]:
    """A row per service, in deployment order: level, name, type, its units
    (hostnames, else names) and what it depends on (``ad (domain)``)."""
    nodes = {node["id"]: node for node in data["nodes"]}

    def name(node_id: str) -> str:
        node = nodes.get(node_id) or {}
        return str(node.get("hostname") or node.get("name") or node_id)
    units: dict[str, list[str]] = {}
    for node in data["nodes"]:
        if node.get("kind") == "unit":
            units.setdefault(node.get("service"), []).append(name(node["id"]))
    depends: dict[str, list[str]] = {}
    for edge in data["edges"]:
        if edge["kind"] == "depends_on":
            depends.setdefault(edge["source"], []).append(
                f"{name(edge['target'])} ({edge['reason']})")
    return [(number, name(sid), (nodes.get(sid) or {}).get("type"),
             ", ".join(units.get(sid, [])), ", ".join(depends.get(sid, [])))
            for number, level in enumerate(data["levels"]) for sid in level]


def outputs(command: Any, client: ApiClient) -> int:
    format_of(command)
    env = find_environment(client, command.environment)
    data = client.get(f"/environments/{env['id']}/outputs")
    rows = output_rows(data)
    emit(command, data, rows, lambda: print_table(
        ("SERVICE", "UNIT", "HOSTNAME", "ADDRESS", "URL"), rows, empty="(no services)"))
    return OK


def output_rows(data: dict[str, Any]) -> list[tuple[Any, ...]]:
    """A row per service (its own address and URL, a farm's load balancer) followed
    by a row per unit (hostname, address, URL)."""
    rows: list[tuple[Any, ...]] = []
    for service in data.get("services") or []:
        rows.append((service.get("name"), None, None, service.get("address"),
                     service.get("url")))
        rows.extend((service.get("name"), unit.get("name"), unit.get("hostname"),
                     unit.get("address"), unit.get("url"))
                    for unit in service.get("units") or [])
    return rows
