"""``fornace deployments ENV [DEPLOYMENT]``: the 0.2 view of an environment's
jobs (every job is a deployment there), newest first, or one deployment's
reports."""
from __future__ import annotations

import argparse
from typing import Any

from fornace.cli.client.common import OK, add_command, dispatch, find_environment
from fornace.cli.client.follow import report_line
from fornace.cli.client.formats import add_format_option, emit, format_of, local_time, print_table
from fornace.cli.client.http import ApiClient


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    deployments = add_command(
        subparsers, "deployments", "list the deployments of an environment (0.2 view)",
        "The environment's deployments (every job, as the 0.2 API shows them), newest "
        "first; with DEPLOYMENT, its reports.",
        ["fornace deployments demo",
         "fornace deployments demo 3f2a9c0e41d84b7f9a56e1c2d3b4a5f6",
         "fornace deployments demo -f yaml"])
    deployments.add_argument("environment", metavar="ENV", help="environment id or name")
    deployments.add_argument("deployment", nargs="?", metavar="DEPLOYMENT",
                             help="a deployment id: show its reports")
    add_format_option(deployments)


def run(conf: Any) -> int:
    return dispatch(conf.command, {"deployments": deployments})


def deployments(command: Any, client: ApiClient) -> int:
    format_of(command)
    env = find_environment(client, command.environment)
    base = f"/environments/{env['id']}/deployments"
    if command.deployment:
        data = client.get(f"{base}/{command.deployment}")
        reports = data["reports"]

        def show() -> None:     # whole texts, one line each (a table would cut them)
            for report in reports:
                print(f"{local_time(report['created'])} {report_line(report)}")
            if not reports:
                print("(no reports)")
        emit(command, data, [(local_time(r["created"]), r.get("level") or "info", r["text"])
                             for r in reports], show)
        return OK
    data = client.get(base)
    headers = ("DEPLOYMENT", "STATE", "STARTED", "FINISHED")
    rows = [(d["id"], d["state"], local_time(d["started"]), local_time(d["finished"]))
            for d in data["deployments"]]
    emit(command, data, rows, lambda: print_table(headers, rows, empty="(no deployments yet)"))
    return OK
