"""Taking over the job of a silent lock holder, on the database's heartbeat.

A conductor that stops without dying (SIGSTOP, a paused VM, a process stuck
in the kernel) keeps its task message unacknowledged: RabbitMQ hands it to
another conductor only when it drops the connection (a minute or more of
missed broker heartbeats); the folder broker never does.  Its job lock
goes stale after ``lock_stale_after`` seconds without a heartbeat, but no
other conductor has the task to run.

So the lock row keeps the task of its grant (:class:`HeldTask`), and every
conductor sweeps the table every few seconds (:class:`Takeover`): a held lock
whose heartbeat is stale and whose job has not ended is claimed by one
conditional UPDATE (one conductor wins; a claim holds for a stale period) and
its task runs in this conductor, through the normal path: ``acquire`` takes
the silent holder's lock over (token + 1).  The old holder, if it wakes,
finds its grant gone at its next heartbeat or fence check and stops without
acting; the broker's copy of the task, delivered again one day, waits for
the job or is acknowledged as done.

The task runs here rather than going back to the broker: on RabbitMQ a copy
published to the tasks queue may well be pushed to an idle consumer of the
frozen conductor itself, and wait there for the broker's timeout after all.
A conductor claims a takeover only with a consumer slot free
(``max_environments``), and gives the task back to the broker if it stops
before the job's end.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable

from fornace.common.db.outages import described
from fornace.conductor.jobs.lock import HeldTask, JobLock

LOG = logging.getLogger(__name__)

#: (message id) -> whether this conductor can run that task now (a slot free,
#: and the task not already running here)
HasRoom = Callable[[str], bool]
#: (task body, message id) -> the call that runs it in the slot it takes, or
#: None (it cannot run here); the call raises when the task is not answered
Reserve = Callable[[Any, str], "Callable[[], None] | None"]
#: (task body, message id) -> None: the task back to the broker's queue
Requeue = Callable[[Any, str], None]


class Takeover:
    """The sweeper of one conductor (``holder``): its thread looks for silent
    holders every ``every`` seconds (a quarter of ``stale_after``, at most 2 s)
    until ``stop`` is set, except for ``stale_after`` after the database failed
    it (see :meth:`look`)."""

    def __init__(self, locks: JobLock, holder: str, stale_after: float, has_room: HasRoom,
                 reserve: Reserve, requeue: Requeue, stop: threading.Event,
                 every: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.locks = locks
        self.holder = holder
        self.stale_after = stale_after
        self.has_room = has_room
        self.reserve = reserve
        self.requeue = requeue
        self.stop = stop
        self.every = every if every is not None else min(stale_after / 4, 2.0)
        self._thread: threading.Thread | None = None
        self._jobs: list[threading.Thread] = []   # the jobs taken over, running
        self.clock = clock
        self._quiet_until = float("-inf")         # no takeover before (a database failure)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lock-takeover", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the sweeper and the jobs it started (after ``stop``)."""
        for thread in [self._thread, *self._jobs]:
            if thread is not None:
                thread.join(timeout)

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            self.look()

    def look(self) -> list[str]:
        """One :meth:`sweep`, unless the database failed this conductor less than
        ``stale_after`` ago: a heartbeat that stopped while the database was out
        of reach says nothing of its holder, which may well be beating again
        (or have ended its job, its release lost in the outage) by the time
        the database answers; a whole stale period of answers tells."""
        if self.clock() < self._quiet_until:
            return []
        try:
            return self.sweep()
        except Exception as exc:  # noqa: BLE001 -- the database may come back
            self._quiet_until = self.clock() + self.stale_after
            LOG.warning("looking for silent lock holders failed (%s); no takeover for %g s",
                        described(exc), self.stale_after)
            return []

    def sweep(self) -> list[str]:
        """One look: claim and start the jobs of silent holders this conductor
        has room for; their message ids."""
        started = []
        for found in self.locks.silent(self.stale_after, other_than=self.holder):
            if self.stop.is_set():
                break
            if not self.has_room(found.task_id):
                continue
            task = self.locks.claim(found, self.stale_after)
            if task is None:          # it beat again, or another conductor claimed it
                continue
            body = _body(task)
            run = self.reserve(body, task.message_id) if body is not None else None
            if run is None:
                continue
            LOG.warning("environment %s: the holder of job %s (conductor %s, token %d) is "
                        "silent for %g s; this conductor takes the job over",
                        found.environment_id, found.job_id, found.holder, found.token,
                        self.stale_after)
            thread = threading.Thread(target=self._run_job, args=(run, body, task.message_id),
                                      name=f"takeover-{task.message_id}", daemon=True)
            self._jobs = [job for job in self._jobs if job.is_alive()] + [thread]
            thread.start()
            started.append(task.message_id)
        return started

    def _run_job(self, run: Callable[[], None], body: Any, message_id: str) -> None:
        """Run a job taken over; one not answered here (the conductor stops, a
        fault) goes back to the broker, as an unacknowledged message would."""
        try:
            run()
        except Exception as exc:  # noqa: BLE001 -- the conductor's Interrupted included
            LOG.warning("task %s taken over here did not end (%s); it goes back to the queue",
                        message_id, exc)
            try:
                self.requeue(body, message_id)
            except Exception as lost:  # noqa: BLE001 -- the broker's first copy is left
                LOG.error("task %s could not go back to the queue: %s", message_id, lost)


def _body(task: HeldTask) -> Any:
    """The task's body, or None (logged, never shown) when it is not JSON."""
    try:
        return json.loads(task.body)
    except ValueError as exc:
        LOG.error("task %s kept with its lock is not JSON (%s at %d); it cannot be taken over",
                  task.message_id, type(exc).__name__, getattr(exc, "pos", -1))
        return None


def kept(body: Any, message_id: str) -> HeldTask:
    """What a grant keeps of the task it runs."""
    return HeldTask(message_id, json.dumps(body, separators=(",", ":")))
