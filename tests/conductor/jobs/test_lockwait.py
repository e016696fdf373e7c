"""The wait of a job for a lock another job holds: queued once, refused past its bound."""
from __future__ import annotations

import datetime

from fornace.conductor.jobs.lock import LockHeld
from fornace.conductor.jobs.lockwait import LockWait

HELD = LockHeld("j0", "c1", datetime.datetime(2024, 5, 1, 12, 0, 0))
WHERE = "environment e1 is locked by job j0 (conductor c1) since 2024-05-01T12:00:00"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_job_is_queued_once_then_refused_when_its_wait_is_over():
    clock = Clock()
    wait = LockWait("e1", "j1", 30, clock)
    assert not wait.queued and wait.waited() == 0
    assert wait.held(HELD) == (
        "queued", f"{WHERE}; job j1 waits for it (at most 30 s, [conductor] lock_wait)")
    assert wait.queued
    clock.now += 29.9
    assert wait.held(HELD) is None                   # still waiting, nothing new to say
    clock.now += 0.1
    assert wait.held(HELD) == (
        "refused", f"{WHERE}; job j1 waited 30.0 s for it ([conductor] lock_wait); refused, "
                   f"nothing was run")


def test_without_a_wait_the_job_is_refused_at_once():
    wait = LockWait("e1", "j1", 0, Clock())
    assert wait.held(HELD) == (
        "refused", f"{WHERE}; job j1 does not wait ([conductor] lock_wait is 0); refused, "
                   f"nothing was run")
    assert not wait.queued
