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
from fornace.cli.client.output import print_json, print_table
from fornace.cli.client.http import ApiClient


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    jobs = add_command(
        subparsers, "jobs", "list the jobs of an environment, or one job's tasks",
        "Without JOB: the environment's jobs, newest first (action, state, task counts, "
        "start and end). With JOB: its tasks, one per Heat round or unit command "
        "(target, operation, reason, status, summary).",
        ["fornace jobs demo", "fornace jobs demo 3f2a9c0e41d84b7f9a56e1c2d3b4a5f6",
         "fornace jobs demo --json"])
    jobs.add_argument("environment", metavar="ENV", help="environment id or name")
    jobs.add_argument("job", nargs="?", metavar="JOB", help="a job id (see fornace jobs ENV)")

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
         "fornace deployments demo 3f2a9c0e41d84b7f9a56e1c2d3b4a5f6"])
    deployments.add_argument("environment", metavar="ENV", help="environment id or name")
    deployments.add_argument("deployment", nargs="?", metavar="DEPLOYMENT",
                             help="a deployment id: show its reports")


def run(conf: Any) -> int:
    return dispatch(conf.command, {"jobs": jobs, "logs": logs, "deployments": deployments})


def jobs(command: Any, client: ApiClient) -> int:
    env = find_environment(client, command.environment)
    base = f"/environments/{env['id']}/jobs"
    if command.job:
        return _one_job(command, client.get(f"{base}/{command.job}"))
    data = client.get(base)
    if command.json:
        print_json(data)
        return OK
    print_table(("JOB", "ACTION", "STATE", "TASKS", "STARTED", "FINISHED"),
                ((j["id"], j["action"], j["state"], status_counts(j), j["started"],
                  j["finished"]) for j in data["jobs"]), empty="(no jobs yet)")
    return OK


def _one_job(command: Any, job: dict[str, Any]) -> int:
    if command.json:
        print_json(job)
        return OK
    print(f"job {job['id']}: {job['action']} {job['state']} (started {job['started']}, "
          f"finished {job['finished'] or '-'})")
    if job.get("parameters"):
        print(f"parameters: {json.dumps(job['parameters'])}")
    print_table(("TARGET", "OPERATION", "REASON", "STATUS", "SUMMARY"),
                ((t["target_name"], t["operation"], t["reason"], t["status"], t["summary"])
                 for t in job.get("tasks") or []),
                empty="(no tasks)")
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
    env = find_environment(client, command.environment)
    base = f"/environments/{env['id']}/deployments"
    if command.deployment:
        data = client.get(f"{base}/{command.deployment}")
        if command.json:
            print_json(data)
        else:
            for report in data["reports"]:
                print(f"{report['created']} {report_line(report)}")
        return OK
    data = client.get(base)
    if command.json:
        print_json(data)
        return OK
    print_table(("DEPLOYMENT", "STATE", "STARTED", "FINISHED"),
                ((d["id"], d["state"], d["started"], d["finished"])
                 for d in data["deployments"]), empty="(no deployments yet)")
    return OK
