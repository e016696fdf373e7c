"""``fornace jobs ENV [JOB]``: what ran in an environment, and how.

Every deployment, deletion and action is a job made of tasks (a Heat round
or an agent command on one unit); ``jobs`` lists them, newest first, or one
job's tasks.  ``fornace logs`` prints what a job's units wrote, ``fornace
deployments`` is the 0.2 view of the same jobs.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from fornace.cli.client.common import OK, add_command, dispatch, find_environment
from fornace.cli.client.follow import status_counts
from fornace.cli.client.formats import add_format_option, emit, format_of, local_time, print_table
from fornace.cli.client.http import ApiClient


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    jobs = add_command(
        subparsers, "jobs", "list the jobs of an environment, or one job's tasks",
        "Without JOB: the environment's jobs, newest first (action, state, task counts, "
        "start and end, and the workflow package versions each ran: NAME VERSION, or "
        "'data folder' when the environment was pinned to none). With JOB: its tasks, "
        "one per Heat round or unit command (target, operation, reason, status, summary).",
        ["fornace jobs demo", "fornace jobs demo 3f2a9c0e41d84b7f9a56e1c2d3b4a5f6",
         "fornace jobs demo --json", "fornace jobs demo -f value | cut -f1,3"])
    jobs.add_argument("environment", metavar="ENV", help="environment id or name")
    jobs.add_argument("job", nargs="?", metavar="JOB", help="a job id (see fornace jobs ENV)")
    add_format_option(jobs)


def run(conf: Any) -> int:
    return dispatch(conf.command, {"jobs": jobs})


def jobs(command: Any, client: ApiClient) -> int:
    format_of(command)      # contradicting options: said before any request
    env = find_environment(client, command.environment)
    base = f"/environments/{env['id']}/jobs"
    if command.job:
        return _one_job(command, client.get(f"{base}/{command.job}"))
    data = client.get(base)
    headers = ("JOB", "ACTION", "STATE", "TASKS", "STARTED", "FINISHED", "PACKAGES")
    rows = [(j["id"], j["action"], j["state"], status_counts(j), local_time(j["started"]),
             local_time(j["finished"]), packages_text(j)) for j in data["jobs"]]
    emit(command, data, rows, lambda: print_table(headers, rows, empty="(no jobs yet)"))
    return OK


def packages_text(job: dict[str, Any]) -> str:
    """The package versions a job ran (``kvstore 1.1.0``, ``data folder``); ``-``
    for a job from before Fornace kept them."""
    return ", ".join(job.get("packages") or []) or "-"


def _one_job(command: Any, job: dict[str, Any]) -> int:
    """A job and its tasks (value: a row per task)."""
    headers = ("TARGET", "OPERATION", "REASON", "STATUS", "SUMMARY")
    rows = [(t["target_name"], t["operation"], t["reason"], t["status"], t["summary"])
            for t in job.get("tasks") or []]

    def show() -> None:
        print(f"job {job['id']}: {job['action']} {job['state']} (started "
              f"{local_time(job['started']) or '-'}, finished "
              f"{local_time(job['finished']) or '-'})")
        print(f"packages: {packages_text(job)}")
        if job.get("parameters"):
            print(f"parameters: {json.dumps(job['parameters'])}")
        print_table(headers, rows, empty="(no tasks)")
    emit(command, job, rows, show)
    return OK
