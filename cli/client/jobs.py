"""``fornace jobs``, ``fornace logs`` and ``fornace deployments``: what ran, and how.

Every deployment, deletion and action is a job made of tasks (a Heat round
or an agent command on one unit); ``jobs`` lists them, ``logs`` prints the
log lines the units' scripts wrote and the reports, and follows a running
job.  ``deployments`` is the 0.2 view of the same jobs, with their reports.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from fornace.cli.client.common import FAILED, OK, add_command, dispatch, find_environment
from fornace.common.errors import FornaceError
from fornace.cli.client.follow import (ENDED, Follower, follow_job, log_lines, report_line, status_counts,
                         task_line)
from fornace.cli.client.formats import (add_format_option, emit, format_of, local_time,
                                       print_json, print_table)
from fornace.cli.client.http import ApiClient


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    jobs = add_command(
        subparsers, "jobs", "list the jobs of an environment, or one job's tasks",
        "Without JOB: the environment's jobs, newest first (action, state, task counts, "
        "start and end). With JOB: its tasks, one per Heat round or unit command "
        "(target, operation, reason, status, summary).",
        ["fornace jobs demo", "fornace jobs demo 3f2a9c0e41d84b7f9a56e1c2d3b4a5f6",
         "fornace jobs demo --json", "fornace jobs demo -f value | cut -f1,3"])
    jobs.add_argument("environment", metavar="ENV", help="environment id or name")
    jobs.add_argument("job", nargs="?", metavar="JOB", help="a job id (see fornace jobs ENV)")
    add_format_option(jobs)

    logs = add_command(
        subparsers, "logs", "print (and follow) the log lines and reports of a job",
        "Print the log lines of each task of a job (the newest unless --job) and its "
        "reports. With --follow, keep printing them as they arrive until the job ends; "
        "the exit status then says whether it succeeded (0) or not (1).",
        ["fornace logs demo", "fornace logs demo --follow",
         "fornace logs demo --job 3f2a9c0e41d84b7f9a56e1c2d3b4a5f6 --json"])
    logs.add_argument("environment", metavar="ENV", help="environment id or name")
    logs.add_argument("--job", metavar="JOB", help="the job (default: the newest)")
    logs.add_argument("--follow", action="store_true", help="follow until the job ends")

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
    return dispatch(conf.command, {"jobs": jobs, "logs": logs, "deployments": deployments})


def jobs(command: Any, client: ApiClient) -> int:
    format_of(command)      # contradicting options: said before any request
    env = find_environment(client, command.environment)
    base = f"/environments/{env['id']}/jobs"
    if command.job:
        return _one_job(command, client.get(f"{base}/{command.job}"))
    data = client.get(base)
    headers = ("JOB", "ACTION", "STATE", "TASKS", "STARTED", "FINISHED")
    rows = [(j["id"], j["action"], j["state"], status_counts(j), local_time(j["started"]),
             local_time(j["finished"])) for j in data["jobs"]]
    emit(command, data, rows, lambda: print_table(headers, rows, empty="(no jobs yet)"))
    return OK


def _one_job(command: Any, job: dict[str, Any]) -> int:
    """A job and its tasks (value: a row per task)."""
    headers = ("TARGET", "OPERATION", "REASON", "STATUS", "SUMMARY")
    rows = [(t["target_name"], t["operation"], t["reason"], t["status"], t["summary"])
            for t in job.get("tasks") or []]

    def show() -> None:
        print(f"job {job['id']}: {job['action']} {job['state']} (started "
              f"{local_time(job['started']) or '-'}, finished "
              f"{local_time(job['finished']) or '-'})")
        if job.get("parameters"):
            print(f"parameters: {json.dumps(job['parameters'])}")
        print_table(headers, rows, empty="(no tasks)")
    emit(command, job, rows, show)
    return OK


def logs(command: Any, client: ApiClient) -> int:
    env = find_environment(client, command.environment)
    job = _job(client, env["id"], command.job)
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


def _job(client: ApiClient, env_id: str, job_id: str | None) -> dict[str, Any]:
    if job_id:
        return client.get(f"/environments/{env_id}/jobs/{job_id}")
    listed = client.get(f"/environments/{env_id}/jobs")["jobs"]
    if not listed:
        raise FornaceError(f"environment {env_id} has no jobs yet: deploy it first")
    return listed[0]


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
