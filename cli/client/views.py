"""``fornace status`` and ``fornace topology``: how an environment's units are,
and in which order they are deployed."""
from __future__ import annotations

import argparse
from typing import Any

from fornace.cli.client.common import OK, add_command, dispatch, find_environment
from fornace.cli.client.http import ApiClient
from fornace.cli.client.output import print_json, print_table


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    status = add_command(
        subparsers, "status", "show the status of each service and unit",
        "Per service and unit: local status (ok, degraded, error, absent, pending, "
        "unknown; 'fornace action ENV check' refreshes it) and node state (initial, "
        "creating, configured, started, error...), and the job running now.",
        ["fornace status demo", "fornace status demo --json"])
    status.add_argument("environment", metavar="ENV", help="environment id or name")
    topology = add_command(
        subparsers, "topology", "show the dependency order of the services",
        "The services and their units, the dependencies between services (dependsOn or "
        "a reference such as a domain) and the levels they are deployed in: a level "
        "waits for the levels before it.",
        ["fornace topology demo", "fornace topology demo --json"])
    topology.add_argument("environment", metavar="ENV", help="environment id or name")


def run(conf: Any) -> int:
    return dispatch(conf.command, {"status": status, "topology": topology})


def status(command: Any, client: ApiClient) -> int:
    env = find_environment(client, command.environment)
    data = client.get(f"/environments/{env['id']}/status")
    if command.json:
        print_json(data)
        return OK
    print(f"environment {env['name']}: {data['state']}, version {data['version']}"
          + (f", job {data['job']} running" if data.get("job") else ""))
    rows = []
    for service in data["services"]:
        rows.append((service["name"], service["type"], "-", _local(service), _state(service)))
        rows.extend((service["name"], "", unit["name"], _local(unit), _state(unit))
                    for unit in service["units"])
    print_table(("SERVICE", "TYPE", "UNIT", "STATUS", "STATE"), rows, empty="(no services)")
    return OK


def _local(item: dict[str, Any]) -> str:
    return str((item.get("status") or {}).get("local") or "-")


def _state(item: dict[str, Any]) -> str:
    return str((item.get("status") or {}).get("state") or "-")


def topology(command: Any, client: ApiClient) -> int:
    env = find_environment(client, command.environment)
    data = client.get(f"/environments/{env['id']}/topology")
    if command.json:
        print_json(data)
        return OK
    names = {node["id"]: node.get("hostname") or node.get("name") or node["id"]
             for node in data["nodes"]}
    for number, level in enumerate(data["levels"]):
        print(f"level {number}: {', '.join(names.get(i, i) for i in level)}")
    if not data["levels"]:
        print("(no services)")
    for edge in data["edges"]:
        if edge["kind"] == "depends_on":
            print(f"{names.get(edge['source'], edge['source'])} depends on "
                  f"{names.get(edge['target'], edge['target'])} ({edge['reason']})")
    for problem in data["problems"]:
        print(f"problem: {problem}")
    return OK
