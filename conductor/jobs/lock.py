"""One job at a time per environment, across conductors: a lock row per environment.

Two conductors may get tasks of the same environment (two API workers, a
redelivered task, an operator's retry); running both would have them fight
over the same stacks and agents.  Before it runs a job the conductor takes
the environment's row of ``job_locks`` (in the API's database), refreshes
its heartbeat while the job runs and deletes it at the end.  As in Unfurl,
a job that finds the lock taken does not wait: it is refused, and the user
runs it again later.

A row is taken over when it belongs to the same job (the conductor that ran
it died and the broker handed the task to another one) or when its
heartbeat is older than ``stale_after`` seconds (its conductor is gone).
Every step is a single conditional statement, so two conductors racing for
the same environment cannot both win, on PostgreSQL as on SQLite.

Times are the conductors' clocks (UTC): keep them in sync (NTP) and make
``stale_after`` well above the heartbeat interval.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Callable

from sqlalchemy import Engine, delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from fornace.common.db.engine import make_engine
from fornace.common.db.models import JobLock as LockRow, utcnow

Clock = Callable[[], datetime.datetime]


@dataclass(frozen=True)
class LockHeld:
    """Who holds an environment's lock (why a job was refused)."""

    job_id: str
    holder: str
    acquired: datetime.datetime

    def describe(self, environment_id: str) -> str:
        when = self.acquired.isoformat(timespec="seconds")
        return (f"environment {environment_id} is locked by job {self.job_id} "
                f"(conductor {self.holder}) since {when}")


class JobLock:
    """The ``job_locks`` table of the database at ``url_or_engine``."""

    _ATTEMPTS = 5  # a lock released between our insert and update: try again

    def __init__(self, url_or_engine: str | Engine, clock: Clock = utcnow) -> None:
        self.engine = (make_engine(url_or_engine) if isinstance(url_or_engine, str)
                       else url_or_engine)
        self._owns_engine = isinstance(url_or_engine, str)
        self.clock = clock

    def close(self) -> None:
        """Dispose of the engine if this lock made it (from a URL)."""
        if self._owns_engine:
            self.engine.dispose()

    def __enter__(self) -> "JobLock":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def acquire(self, environment_id: str, job_id: str, holder: str,
                stale_after: float = 60.0) -> LockHeld | None:
        """Take the environment's lock for ``job_id``: None when taken, else who holds it."""
        for _ in range(self._ATTEMPTS):
            if self._insert(environment_id, job_id, holder):
                return None
            if self._take_over(environment_id, job_id, holder, stale_after):
                return None
            held = self.holder(environment_id)
            if held is not None:
                return held
        raise RuntimeError(f"environment {environment_id}: the job lock kept changing hands "
                           f"while job {job_id} tried to take it")

    def holder(self, environment_id: str) -> LockHeld | None:
        """Who holds the environment's lock now (None: nobody)."""
        with self.engine.connect() as conn:
            row = conn.execute(select(LockRow.job_id, LockRow.holder, LockRow.acquired).where(
                LockRow.environment_id == environment_id)).first()
        return LockHeld(row.job_id, row.holder, row.acquired) if row is not None else None

    def heartbeat(self, environment_id: str, job_id: str) -> bool:
        """Say the job still runs; False when it no longer holds the lock
        (abandoned by a user, or taken over after a long pause)."""
        with self.engine.begin() as conn:
            return conn.execute(update(LockRow).where(
                LockRow.environment_id == environment_id, LockRow.job_id == job_id).values(
                heartbeat=self.clock())).rowcount == 1

    def release(self, environment_id: str, job_id: str) -> None:
        """Give the lock back at the end of the job (only if the job still holds it)."""
        with self.engine.begin() as conn:
            conn.execute(delete(LockRow).where(LockRow.environment_id == environment_id,
                                               LockRow.job_id == job_id))

    def clear(self, environment_id: str) -> None:
        """Drop the lock whoever holds it (the job was abandoned)."""
        with self.engine.begin() as conn:
            conn.execute(delete(LockRow).where(LockRow.environment_id == environment_id))

    # -- the two race-free steps --------------------------------------------------
    def _insert(self, environment_id: str, job_id: str, holder: str) -> bool:
        now = self.clock()
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(LockRow).values(
                    environment_id=environment_id, job_id=job_id, holder=holder,
                    acquired=now, heartbeat=now))
        except IntegrityError:  # the primary key: someone holds it
            return False
        return True

    def _take_over(self, environment_id: str, job_id: str, holder: str,
                   stale_after: float) -> bool:
        """Take a row of the same job or a stale one, in one conditional UPDATE:
        of two racers the second sees the first's fresh heartbeat and matches nothing."""
        now = self.clock()
        cutoff = now - datetime.timedelta(seconds=stale_after)
        with self.engine.begin() as conn:
            return conn.execute(update(LockRow).where(
                LockRow.environment_id == environment_id,
                or_(LockRow.job_id == job_id, LockRow.heartbeat < cutoff)).values(
                job_id=job_id, holder=holder, acquired=now, heartbeat=now)).rowcount == 1
