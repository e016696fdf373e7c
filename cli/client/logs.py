"""``fornace logs ENV [JOB] [--follow]``: the log lines the units' scripts
wrote during a job (the newest unless JOB, or ``--job``, names one) and its reports; with
``--follow`` they are printed as they arrive, until the job ends."""
from __future__ import annotations

import argparse
from typing import Any

from fornace.common.errors import FornaceError

from fornace.cli.client.common import FAILED, OK, add_command, dispatch, find_environment, find_job
from fornace.cli.client.follow import (ENDED, Follower, follow_job, log_lines, report_line,
                                       task_line)
from fornace.cli.client.formats import print_json
from fornace.cli.client.http import ApiClient


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    logs = add_command(
        subparsers, "logs", "print (and follow) the log lines and reports of a job",
        "Print the log lines of each task of a job (the newest unless JOB names one; "
        "--job JOB says the same) and its "
        "reports. With --follow, keep printing them as they arrive until the job ends; "
        "the exit status then says whether it succeeded (0) or not (1).",
        ["fornace logs demo", "fornace logs demo --follow",
         "fornace logs demo 3f2a9c0e41d84b7f9a56e1c2d3b4a5f6 --json"])
    logs.add_argument("environment", metavar="ENV", help="environment id or name")
    logs.add_argument("job", nargs="?", metavar="JOB",
                      help="a job id (see fornace jobs ENV; default: the newest)")
    logs.add_argument("--job", dest="job_option", metavar="JOB",
                      help="the same as JOB, as earlier versions took it")
    logs.add_argument("--follow", action="store_true", help="follow until the job ends")


def run(conf: Any) -> int:
    return dispatch(conf.command, {"logs": logs})


def logs(command: Any, client: ApiClient) -> int:
    if command.job and command.job_option and command.job != command.job_option:
        raise FornaceError(f"two jobs given: {command.job} and --job {command.job_option}")
    env = find_environment(client, command.environment)
    job = find_job(client, env["id"], command.job or command.job_option)
    if command.follow:
        outcome = follow_job(client, env, job, command.json, logs=True)
        if command.json:
            print_json(outcome.document())
        return OK if outcome.ok else FAILED
    outcome = Follower(client, env["id"], job["id"], live=None).read()
    if command.json:
        print_json(outcome.document())
        return OK
    for task in outcome.job.get("tasks") or []:
        for line in log_lines(task):
            print(line)
        if task["status"] in ENDED:
            print(task_line(task))
    for report in outcome.reports:
        print(report_line(report))
    print(f"job {job['id']}: {job['action']} {outcome.job['state']}")
    return OK
