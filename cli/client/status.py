"""``fornace status ENV``: how each service and unit of an environment is (its
local status and node state, hostname and address), and the job running now."""
from __future__ import annotations

import argparse
from typing import Any

from fornace.cli.client.common import OK, add_environment_view, dispatch, environment_view
from fornace.cli.client.formats import emit, print_table
from fornace.cli.client.http import ApiClient


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    add_environment_view(
        subparsers, "status", "show the status of each service and unit",
        "Per service and unit: local status (ok, degraded, error, absent, pending, "
        "unknown; 'fornace action ENV check' refreshes it) and node state (initial, "
        "creating, configured, started, error...), hostname and address (while a job "
        "runs: as soon as it knows them), and the job running now.",
        ["fornace status demo", "fornace status demo --json",
         "fornace status demo -f value | cut -f3,4"])


def run(conf: Any) -> int:
    return dispatch(conf.command, {"status": status})


def status(command: Any, client: ApiClient) -> int:
    env, data = environment_view(command, client, "status")
    rows = []
    for service in data["services"]:
        rows.append((service["name"], service["type"], None, _local(service), _state(service),
                     None, service.get("address")))
        rows.extend((service["name"], None, unit["name"], _local(unit), _state(unit),
                     unit.get("hostname"), unit.get("address"))
                    for unit in service["units"])

    def show() -> None:
        print(f"environment {env['name']}: {data['state']}, version {data['version']}"
              + (f", job {data['job']} running" if data.get("job") else ""))
        print_table(("SERVICE", "TYPE", "UNIT", "STATUS", "STATE", "HOSTNAME", "ADDRESS"),
                    rows, empty="(no services)")
    emit(command, data, rows, show)
    return OK


def _local(item: dict[str, Any]) -> str:
    return str((item.get("status") or {}).get("local") or "-")


def _state(item: dict[str, Any]) -> str:
    return str((item.get("status") or {}).get("state") or "-")
