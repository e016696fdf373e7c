"""``fornace topology ENV``: the dependency order of an environment's services:
the levels they are deployed in and what each depends on."""
from __future__ import annotations

import argparse
from typing import Any

from fornace.cli.client.common import OK, add_environment_view, dispatch, environment_view
from fornace.cli.client.formats import emit, print_table
from fornace.cli.client.http import ApiClient


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    add_environment_view(
        subparsers, "topology", "show the dependency order of the services",
        "The services and their units, the dependencies between services (dependsOn or "
        "a reference such as a domain) and the levels they are deployed in: a level "
        "waits for the levels before it. A row per service: level, name, type, units, "
        "what it depends on (and why).",
        ["fornace topology demo", "fornace topology demo --json"])


def run(conf: Any) -> int:
    return dispatch(conf.command, {"topology": topology})


def topology(command: Any, client: ApiClient) -> int:
    _, data = environment_view(command, client, "topology")
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
