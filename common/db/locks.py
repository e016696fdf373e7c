"""Statements on the ``job_locks`` table that both services run.

The conductor takes, beats and releases an environment's lock
(``fornace.conductor.jobs.lock``); the API revokes it when a user abandons
the running job.  A revocation frees the row and raises its fencing token, so
the job that held it finds it lost at its next heartbeat and anything it
still writes carries a token older than the environment's; the task it kept
for a takeover goes with it.
"""
from __future__ import annotations

import datetime
from typing import Any

from sqlalchemy import Interval, func, literal, update

from fornace.common.db.models import JobLock, utcnow

REVOKED = "(revoked)"   # the holder of a revoked lock until its job has had time to stop
#: the values of a row that keeps no task to take over (freed or revoked)
NO_TASK = {"task_id": None, "task_body": None, "takeover_at": None}


def lock_now(dialect_name: str) -> Any:
    """The time locks are stamped and compared with: the database's clock on
    PostgreSQL (conductors on several machines read one clock), this machine's
    on SQLite (a file on one machine)."""
    return func.timezone("UTC", func.now()) if dialect_name == "postgresql" else utcnow()


def before(now: Any, seconds: float) -> Any:
    """``seconds`` before ``now``: a time of this machine's, or the database's
    clock (:func:`lock_now` on PostgreSQL), subtracted in SQL."""
    ago = datetime.timedelta(seconds=seconds)
    if isinstance(now, datetime.datetime):
        return now - ago
    return now - literal(ago, Interval())


def revoke(connection: Any, environment_id: str, now: Any = None) -> int:
    """Free the environment's lock whoever holds it; return the new token
    (0 when the environment never had a lock).  The next job may take it once
    the revoked one has had time to notice (``JobLock``'s ``revoke_grace``)."""
    if now is None:
        dialect = getattr(connection, "dialect", None) or connection.get_bind().dialect
        now = lock_now(dialect.name)
    row = connection.execute(update(JobLock).where(JobLock.environment_id == environment_id)
                             .values(job_id=None, holder=REVOKED, heartbeat=now,
                                     token=JobLock.token + 1, **NO_TASK)
                             .returning(JobLock.token)).first()
    return row.token if row is not None else 0
