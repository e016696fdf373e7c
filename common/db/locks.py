"""Statements on the ``job_locks`` table that both services run.

The conductor takes, beats and releases an environment's lock
(``fornace.conductor.jobs.lock``); the API revokes it when a user abandons
the running job.  A revocation frees the row and raises its fencing token, so
the job that held it finds it lost at its next heartbeat and anything it
still writes carries a token older than the environment's.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import update

from fornace.common.db.models import JobLock


def revoke(connection: Any, environment_id: str) -> int:
    """Free the environment's lock whoever holds it; return the new token
    (0 when the environment never had a lock)."""
    row = connection.execute(update(JobLock).where(JobLock.environment_id == environment_id)
                             .values(job_id=None, holder=None, token=JobLock.token + 1)
                             .returning(JobLock.token)).first()
    return row.token if row is not None else 0
