"""The conductors' periodic purge of old history (``[database] history_days``).

Every conductor looks every minute or so whether the purge is due; one of
them at a time runs it, about once per ``every`` seconds across them all: its
turn is one row of the lock table (:data:`TURN`, no environment's), claimed by
one conditional UPDATE on the time of the last turn, compared on the
database's clock (PostgreSQL's), as a job's lock is.  The winner removes what
:mod:`fornace.common.db.history` calls history, in small batches, and stops
between two batches when the conductor stops.  A purge lasting longer than
``every`` may meet the next one: both remove what is still there.
"""
from __future__ import annotations

import datetime
import logging
import threading

from sqlalchemy import update
from sqlalchemy.engine import Engine

from fornace.common.db import locks
from fornace.common.db.history import MEANING, TABLES, Cutoff, purge
from fornace.common.db.inserts import insert_or_nothing
from fornace.common.db.models import JobLock
from fornace.common.db.outages import described

LOG = logging.getLogger(__name__)

#: the lock row whose ``acquired`` says when the last purge started (no environment
#: id has parentheses); ``fornace gc`` leaves it
TURN = "(history purge)"
_NEVER = datetime.datetime(1970, 1, 1)


class HistoryPurge:
    """The periodic purge of one conductor (``holder``): history older than
    ``days`` days, about every ``every`` seconds across the conductors, until
    ``stop`` is set."""

    def __init__(self, engine: Engine, holder: str, days: int, stop: threading.Event,
                 every: float = 3600.0) -> None:
        self.engine = engine
        self.holder = holder
        self.days = days
        self.stop = stop
        self.every = every
        self.look_every = min(every / 4, 60.0)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="history-purge", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self.stop.wait(self.look_every):
            self.look()

    def look(self) -> dict[str, int] | None:
        """The purge, when it is this conductor's turn: the rows removed per
        table (None: not its turn, or the database failed it, logged)."""
        try:
            if not self.claim():
                return None
            removed = purge(self.engine, Cutoff(self.days), stop=self.stop.is_set)
        except Exception as exc:  # noqa: BLE001 -- the next turn tries again
            LOG.warning("purging the history older than %d day(s) failed (%s); the next "
                        "turn tries again", self.days, described(exc))
            return None
        if any(removed.values()):
            LOG.info("purged the history older than %d day(s): %s", self.days, ", ".join(
                f"{removed[name]} {MEANING[name]}" for name in TABLES if removed[name]))
        return removed

    def claim(self) -> bool:
        """Whether this conductor takes the purge's turn now: none was taken
        for ``every`` seconds (one conditional UPDATE: one conductor wins)."""
        with self.engine.begin() as connection:
            dialect = connection.dialect.name
            now = locks.lock_now(dialect)
            first = insert_or_nothing(dialect, JobLock.__table__)
            if first is not None:
                connection.execute(first.values(environment_id=TURN, acquired=_NEVER,
                                                 heartbeat=_NEVER, token=0))
            due = locks.before(now, self.every)
            return connection.execute(update(JobLock).where(
                JobLock.environment_id == TURN, JobLock.job_id.is_(None),
                JobLock.acquired < due).values(
                holder=self.holder, acquired=now, heartbeat=now,
                token=JobLock.token + 1)).rowcount == 1
