"""Following a job whose environment disappears under it."""
from __future__ import annotations

import datetime
import io
import re
import time

from fornace.cli.client import follow
from fornace.cli.client.follow import Follower, Outcome
from fornace.cli.client.http import ClientError
from fornace.cli.client.formats import Live


class Vanishing:
    """An API whose environment is deleted after the first read of the job."""

    def __init__(self, action: str) -> None:
        self.action, self.reads = action, 0

    def get(self, path: str):
        if path.endswith("/jobs/j1"):
            self.reads += 1
            if self.reads > 1:
                raise ClientError(f"GET {path}: 404 environment not found", 404)
            return {"id": "j1", "action": self.action, "state": "running", "tasks": []}
        return {"reports": [{"id": "r1", "level": "info", "text": "Creating instance web1"}]}


def test_a_job_whose_environment_is_deleted_under_it_ends_abandoned():
    """Regression: `fornace deploy` following its job died on a raw 404 when a user
    ran `fornace env delete --abandon` meanwhile."""
    follower = Follower(Vanishing("deploy"), "e1", "j1", None, name="web")
    outcome = follower.follow()
    assert outcome.gone and not outcome.ok and outcome.job["state"] == "abandoned"
    assert [r["id"] for r in outcome.reports] == ["r1"]          # what was seen is kept
    assert follower.ending(outcome).startswith("deploy FAILED (abandoned): environment web "
                                               "was deleted while job j1 ran")


def test_a_deletion_that_succeeded_still_ends_well():
    follower = Follower(Vanishing("delete"), "e1", "j1", None, deleting=True, name="web")
    outcome = follower.follow()
    assert outcome.gone and outcome.ok
    assert follower.ending(outcome).startswith("environment web deleted in")


# -------------------------------------------------- the counter and the duration

def _task(number: int, status: str) -> dict:
    return {"change_id": f"c{number:02d}", "target_name": f"web{number}",
            "operation": "Linux/DeployStaticSite", "status": status, "summary": None}


def test_the_piped_counter_counts_each_task_once_when_it_ends():
    """Regression: six tasks that ended between two reads of the job were all printed
    as ``[7/11]`` (the count at that read was stamped on each of their lines)."""
    stream = io.StringIO()
    follower = Follower(None, "e1", "j1", Live("deploy web", stream, tty=False))
    first = [_task(1, "ok")] + [_task(n, "running") for n in range(2, 12)]
    second = [_task(n, "ok") for n in range(1, 8)] + [_task(n, "running") for n in range(8, 12)]
    for tasks in (first, second, second):       # the last read: nothing new
        follower.show(Outcome({"id": "j1", "state": "running", "tasks": tasks}))
    counters = re.findall(r"^\[(\d+)/(\d+)\] web(\d+) ", stream.getvalue(), re.M)
    assert counters == [(str(n), "11", str(n)) for n in range(1, 8)], stream.getvalue()


def test_the_bar_on_a_terminal_counts_the_same_way():
    stream = io.StringIO()
    follower = Follower(None, "e1", "j1", Live("deploy web", stream, tty=True))
    follower.show(Outcome({"id": "j1", "state": "running",
                           "tasks": [_task(1, "ok"), _task(2, "ok"), _task(3, "running")]}))
    bars = re.findall(r"\] (\d+)/(\d+) tasks", stream.getvalue())
    assert bars[-1] == ("2", "3") and ("1", "3") in bars


class Finished:
    """An API whose job ran 6 s, long before anyone follows it."""

    def get(self, path: str):
        if path.endswith("/jobs/j1"):
            return {"id": "j1", "action": "deploy", "state": "success",
                    "started": "2024-05-01T10:00:00", "finished": "2024-05-01T10:00:06",
                    "task_counts": {"ok": 3}, "tasks": []}
        return {"reports": []}


def test_the_ending_line_gives_the_jobs_own_duration(monkeypatch):
    """Regression: ``logs --follow`` of a job that ran 6 s said "in 1 s" (the time
    since following began)."""
    monkeypatch.setattr(follow, "SETTLE", 0)
    follower = Follower(Finished(), "e1", "j1", None, name="web")
    outcome = follower.follow()
    assert follower.ending(outcome) == "deploy succeeded: job j1 in 6 s, tasks: 3 ok"


def test_a_running_job_counts_from_its_start_not_from_the_following():
    before = time.monotonic()
    started = (datetime.datetime.now(datetime.timezone.utc)
               - datetime.timedelta(seconds=40)).replace(tzinfo=None)
    follower = Follower(None, "e1", "j1", None)
    running = follower.elapsed({"started": started.isoformat(timespec="seconds"),
                                "finished": None})
    followed = follower.elapsed({})     # no start known: the time followed
    # bounded by what this test measured itself, not by how fast it ran
    assert 40 <= running <= 41 + (time.monotonic() - before)   # 41: the start's whole seconds
    assert 0 <= followed <= time.monotonic() - before


class Queued:
    """An API whose job waits for its environment's lock for two reads, then runs
    and succeeds."""

    STATES = ["queued", "queued", "running", "success"]

    def __init__(self) -> None:
        self.reads = 0

    def get(self, path: str):
        if path.endswith("/jobs/j1"):
            state = self.STATES[min(self.reads, len(self.STATES) - 1)]
            self.reads += 1
            return {"id": "j1", "action": "deploy", "state": state, "tasks": [],
                    "started": "2024-05-01T10:00:00",
                    "finished": "2024-05-01T10:00:09" if state == "success" else None}
        return {"reports": [{"id": "r1", "level": "info",
                             "text": "environment e1 is locked by job j0; job j1 waits for it"}]}


def test_a_queued_job_is_followed_until_it_ends(monkeypatch):
    """Issue 29: a job waiting for its environment's lock is ``queued``: following
    it went on only while it was ``running``, so it stopped at once."""
    monkeypatch.setattr(follow, "POLL", 0)
    monkeypatch.setattr(follow, "SETTLE", 0)
    api = Queued()
    outcome = Follower(api, "e1", "j1", None, name="web").follow()
    assert outcome.ok and api.reads == 5      # the four states, and the settling read
    assert [r["id"] for r in outcome.reports] == ["r1"]
