"""Following a job from the command line until it ends.

The API has no push channel: the job, its tasks (with their log lines) and
its reports are polled and only what is new is printed -- a line per task
as it ends (hostname, operation, status), the reports, and with ``logs``
the scripts' log lines as they arrive.  The job ends when the conductor's
result is stored; reports travel on another queue and an error report may
land just after it (the API then marks the job failed), so the job is read
once more a moment later before its outcome is trusted.
"""
from __future__ import annotations

import datetime
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from fornace.cli.client.common import FAILED, OK
from fornace.cli.client.http import ApiClient, ClientError
from fornace.cli.client.formats import Live, cell, parse_time, print_json
from fornace.common.contract import UNENDED_JOB_STATES
from fornace.common.errors import FornaceError

POLL = 0.5      # seconds between two reads of the job
SETTLE = 0.7    # seconds to wait for late reports once the job ended
ENDED = ("ok", "error", "skipped", "blocked", "cancelled", "planned")


@dataclass
class Outcome:
    """How a job ended: its last view (with tasks) and its reports."""

    job: dict[str, Any]
    reports: list[dict[str, Any]] = field(default_factory=list)
    gone: bool = False      # the environment no longer exists

    @property
    def ok(self) -> bool:
        return self.job["state"] == "success"

    def document(self) -> dict[str, Any]:
        """What ``--json`` prints."""
        return {"job": self.job, "reports": self.reports, "environment_deleted": self.gone}


def task_line(task: dict[str, Any]) -> str:
    """One ended task: ``web1  Linux/DeployWebServer  ok``, and why when it is not ok."""
    text = f"{task.get('target_name') or '-':<14} {task.get('operation') or '-':<30} " \
           f"{task['status']}"
    if task["status"] in ("error", "blocked", "cancelled") and task.get("summary"):
        text += f": {cell(task['summary'])}"
    return text


def log_lines(task: dict[str, Any], start: int = 0) -> list[str]:
    """The task's log lines from ``start`` on, each after its unit and operation."""
    label = f"{task.get('target_name') or '-'} {task.get('operation') or '-'}"
    return [f"{label} | {line}" for line in (task.get("log") or [])[start:]]


def report_line(report: dict[str, Any]) -> str:
    level = report.get("level") or "info"
    return f"{'report' if level == 'info' else level}: {report['text']}"


def status_counts(job: dict[str, Any]) -> str:
    counts = job.get("task_counts") or {}
    return ", ".join(f"{number} {status}" for status, number in sorted(counts.items())) \
        or "no tasks"


class Follower:
    """Polls one job of an environment and prints what is new on ``live``."""

    def __init__(self, client: ApiClient, env_id: str, job_id: str, live: Live | None,
                 logs: bool = False, deleting: bool = False, name: str | None = None) -> None:
        self.client = client
        self.env_id = env_id
        self.name = name or env_id
        self.job_id = job_id
        self.live = live
        self.logs = logs
        self.deleting = deleting    # the environment disappears when the job succeeds
        self.started = time.monotonic()
        self._ended: set[str] = set()
        self._log_lines: dict[str, int] = {}
        self._reports: set[str] = set()
        self._last: Outcome | None = None

    def follow(self) -> Outcome:
        """Print until the job ends; its outcome.  Ctrl-C stops following, not the job."""
        try:
            while True:
                outcome = self.read()
                self.show(outcome)
                if outcome.gone:
                    return outcome
                if outcome.job["state"] not in UNENDED_JOB_STATES:   # queued goes on
                    time.sleep(SETTLE)
                    outcome = self.read()
                    self.show(outcome)
                    return outcome
                time.sleep(POLL)
        except KeyboardInterrupt:
            if self.live is not None:
                self.live.close()
            print(f"fornace: stopped following job {self.job_id}; it goes on "
                  f"(fornace logs {self.env_id} --follow)", file=sys.stderr)
            raise
        finally:
            if self.live is not None:
                self.live.close()

    def read(self) -> Outcome:
        """The job and its reports now; ``gone`` once a deleted environment is."""
        base = f"/environments/{self.env_id}"
        try:
            job = self.client.get(f"{base}/jobs/{self.job_id}")
            reports = self.client.get(f"{base}/deployments/{self.job_id}")["reports"]
        except ClientError as exc:
            if exc.status != 404:
                raise
            # the environment is gone (and its jobs with it): a deletion that
            # succeeded, or -- for any other job -- one abandoned by a user's
            # ``env delete --abandon`` while it ran; the job's last view
            last = self._last or Outcome({"id": self.job_id,
                                          "action": "delete" if self.deleting else "job"})
            state = "success" if self.deleting else "abandoned"
            return Outcome({**last.job, "state": state}, last.reports, gone=True)
        self._last = Outcome(job, reports)
        return self._last

    def show(self, outcome: Outcome) -> None:
        """Print what is new since the last read.

        A task is counted once, when its line is printed: the counter goes up by
        one per line.  (It used to be the number of tasks ended at this read,
        stamped on every line of the read: six tasks that ended between two reads
        all said ``[7/11]``.)
        """
        if self.live is None:
            return
        tasks = outcome.job.get("tasks") or []
        seconds = self.elapsed(outcome.job)
        self.live.progress(len(self._ended), len(tasks), seconds)
        for task in tasks:
            if self.logs:
                self._show_log(task)
            if task["status"] in ENDED and task["change_id"] not in self._ended:
                self._ended.add(task["change_id"])
                self.live.progress(len(self._ended), len(tasks), seconds)
                self.live.line(task_line(task), counted=True)
        for report in outcome.reports:
            if report["id"] not in self._reports:
                self._reports.add(report["id"])
                self.live.line(report_line(report))

    def _show_log(self, task: dict[str, Any]) -> None:
        seen = self._log_lines.get(task["change_id"], 0)
        for line in log_lines(task, seen):
            self.live.line(line)
        self._log_lines[task["change_id"]] = len(task.get("log") or [])

    def elapsed(self, job: dict[str, Any]) -> float:
        """How long the job has run: from its start (the API's time) to its end, or to
        now while it runs; the time this command has followed it when the API
        gave no start (never less: a clock behind the API's is no reason to
        show less than what was seen)."""
        following = time.monotonic() - self.started
        started = parse_time(job.get("started"))
        if started is None:
            return following
        finished = parse_time(job.get("finished"))
        if finished is not None:
            return max(0.0, (finished - started).total_seconds())
        now = datetime.datetime.now(datetime.timezone.utc)
        return max(following, (now - started).total_seconds())

    def ending(self, outcome: Outcome) -> str:
        """The last line: what happened and how long the job took (from its start
        to its end as the API recorded them: ``logs --follow`` of a job that ran
        6 s says 6 s however late it began following)."""
        seconds = self.elapsed(outcome.job)
        if outcome.gone and self.deleting:
            return f"environment {self.name} deleted in {seconds:.0f} s"
        if outcome.gone:
            return (f"{outcome.job.get('action', 'job')} FAILED (abandoned): environment "
                    f"{self.name} was deleted while job {self.job_id} ran, after "
                    f"{seconds:.0f} s")
        job = outcome.job
        verdict = "succeeded" if outcome.ok else f"FAILED ({job['state']})"
        return (f"{job['action']} {verdict}: job {job['id']} in {seconds:.0f} s, tasks: "
                f"{status_counts(job)}")


def newest_job(client: ApiClient, env_id: str, action: str) -> dict[str, Any]:
    """The job of ``action`` just started on the environment (routes such as the
    session deploy answer without it; one job runs at a time, so it is the newest)."""
    jobs = client.get(f"/environments/{env_id}/jobs")["jobs"]
    if not jobs or jobs[0]["action"] != action:
        raise FornaceError(f"the {action} job of environment {env_id} is not the newest of "
                           f"its jobs: see fornace jobs {env_id}")
    return jobs[0]


def follow_job(client: ApiClient, env: dict[str, Any], job: dict[str, Any], as_json: bool,
               logs: bool = False) -> Outcome:
    """Follow a job as the deploy/action/logs commands do: live lines, or silently
    for ``--json``; prints the ending line (not with ``--json``)."""
    live = None if as_json else Live(f"{job['action']} {env['name']}")
    follower = Follower(client, env["id"], job["id"], live, logs=logs,
                        deleting=job.get("action") == "delete", name=env["name"])
    outcome = follower.follow()
    if not as_json:
        print(follower.ending(outcome), flush=True)
    return outcome


def follow_or_return(command: Any, client: ApiClient, env: dict[str, Any],
                     job: dict[str, Any]) -> int:
    """Follow the job (unless --no-follow); 0 when it succeeded."""
    if command.no_follow:
        if command.json:
            print_json(job)
        else:
            print(f"{job['action']} started: job {job['id']} (follow it with 'fornace logs "
                  f"{command.environment} --follow')")
        return OK
    if not command.json:
        print(f"{job['action']} of environment {env['name']}: job {job['id']}", flush=True)
    outcome = follow_job(client, env, job, command.json)
    if command.json:
        print_json(outcome.document())
    return OK if outcome.ok else FAILED
