"""The fence of a job: is its grant still the environment's lock, right now?

The heartbeat finds a lost lock only every few seconds, and a job checks it
only between steps; a conductor frozen (SIGSTOP, a VM paused) and taken over
meanwhile would, once it wakes, go on with the step it had in hand.  So each
step that changes the cloud (a stack action, a plan sent to an agent) first
asks the database, synchronously, with the one conditional UPDATE of a
heartbeat (:meth:`JobLock.heartbeat`).  A database that does not answer
within a short retry counts as a lost lock: a job that cannot prove it still
holds its environment does not touch it.

A confirmation refreshes the heartbeat, so for ``lock_stale_after`` after it
nobody can take the lock over; only an abandon can revoke it.  A fence made
with ``fresh_for`` therefore lets the steps of the next ``fresh_for`` seconds
(monotonic: a frozen process's clock runs on while it is stopped, so a woken
one asks again) go without asking: a burst of a thousand plans costs a few
queries, not a thousand, and an abandon is seen at most ``fresh_for`` later.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Sequence

from fornace.common.db.outages import described, retried
from fornace.conductor.executors.base import Fenced
from fornace.conductor.jobs.lock import Grant, JobLock

LOG = logging.getLogger(__name__)

#: seconds between tries when the database does not answer (about 2 s in all)
BACKOFF = (0.25, 0.5, 1.0)


class GrantFence:
    """The :data:`~fornace.conductor.executors.base.Fence` of one grant: called
    before a step that changes the cloud, it returns when the grant still holds
    the lock (refreshing its heartbeat), or sets ``lost`` and raises
    :class:`Fenced`."""

    def __init__(self, locks: JobLock, grant: Grant, lost: threading.Event,
                 backoff: Sequence[float] = BACKOFF, fresh_for: float = 0.0,
                 clock: Callable[[], float] = time.monotonic,
                 confirmed: float | None = None) -> None:
        """``confirmed``: the ``clock`` time the grant was asked for (taking the
        lock stamps its heartbeat: a confirmation like any other), so a first
        step within ``fresh_for`` of it does not ask again; None: ask."""
        self.locks = locks
        self.grant = grant
        self.lost = lost
        self.backoff = backoff
        self.fresh_for = fresh_for
        self.clock = clock
        self._confirmed = confirmed   # when the database last said yes

    def __call__(self) -> None:
        grant = self.grant
        if not self.lost.is_set():
            if (self._confirmed is not None
                    and self.clock() - self._confirmed < self.fresh_for):
                return
            asked = self.clock()
            try:
                held = retried(lambda: self.locks.heartbeat(grant),
                               f"job {grant.job_id}: checking its lock", self.backoff)
            except Exception as exc:  # noqa: BLE001 -- unreachable: on the safe side
                LOG.warning("environment %s: job %s cannot confirm it holds the lock (%s); "
                            "taken as lost", grant.environment_id, grant.job_id, described(exc))
                held = False
            if held:
                self._confirmed = asked
                return
            self.lost.set()
        LOG.warning("environment %s: job %s no longer holds the lock (token %d): the step "
                    "that would change the cloud is not done", grant.environment_id,
                    grant.job_id, grant.token)
        raise Fenced(f"job {grant.job_id}: its grant (token {grant.token}) is no longer the "
                     f"lock of environment {grant.environment_id}")
