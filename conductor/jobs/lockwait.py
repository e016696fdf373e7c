"""A job that finds its environment locked by another job waits its turn, for a while.

The API runs one job per environment at a time, yet a conductor may still
find the environment locked by the job before: its result was stored (so
the API accepted the next job) a moment before its conductor freed the
lock, or a short database outage delayed the release.  Refusing the new job
then would end a job the API had answered as accepted.  It waits instead:
shown ``queued``, with which job holds the lock, on which conductor and
since when, for at most ``[conductor] lock_wait`` seconds; only then is it
refused, saying how long it waited.
"""
from __future__ import annotations

import time
from typing import Callable

from fornace.conductor.jobs.lock import LockHeld


class LockWait:
    """One job's wait for the lock of ``environment_id`` that another job holds,
    at most ``bound`` seconds (0: refused at once)."""

    def __init__(self, environment_id: str, job_id: str, bound: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.environment_id = environment_id
        self.job_id = job_id
        self.bound = bound
        self.clock = clock
        self.since: float | None = None   # when it first found another job holding it

    @property
    def queued(self) -> bool:
        """Whether the job has waited behind another one."""
        return self.since is not None

    def waited(self) -> float:
        return 0.0 if self.since is None else self.clock() - self.since

    def held(self, found: LockHeld) -> tuple[str, str] | None:
        """The lock is held by another job: what to say of this job now --
        ``("queued", why)`` the first time, ``("refused", why)`` once the wait
        is over (the job must not run) -- or None: it goes on waiting."""
        where = found.describe(self.environment_id)
        if self.since is None and self.bound > 0:
            self.since = self.clock()
            return "queued", (f"{where}; job {self.job_id} waits for it (at most "
                              f"{self.bound:g} s, [conductor] lock_wait)")
        if self.since is not None and self.waited() < self.bound:
            return None
        how_long = (f"waited {self.waited():.1f} s for it ([conductor] lock_wait)"
                    if self.since is not None else "does not wait ([conductor] lock_wait is 0)")
        return "refused", f"{where}; job {self.job_id} {how_long}; refused, nothing was run"
