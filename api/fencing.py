"""Fencing: what a job run sends after it lost its environment's lock is dropped.

Job events, reports and results carry the lock token their run was granted
(contract 1.3); a newer grant, or an abandon, raised the environment's token
since, so a write carrying a lower one comes from a run that no longer owns
the environment.  Writes without a token (no lock table at the conductor,
0.2 senders) are taken as they come.
"""
from __future__ import annotations

import logging
from typing import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session as DbSession

from fornace.api.ids import could_be_id
from fornace.common.db.models import JobLock

LOG = logging.getLogger(__name__)


def lock_tokens(db: DbSession, environment_ids: Iterable[str]) -> dict[str, int]:
    """The current lock token of each environment that has one, in one query
    (for batches: :func:`fenced` then decides per write)."""
    wanted = [env_id for env_id in set(environment_ids) if could_be_id(env_id)]
    if not wanted:
        return {}
    rows = db.execute(select(JobLock.environment_id, JobLock.token).where(
        JobLock.environment_id.in_(wanted)))
    return {env_id: token for env_id, token in rows}


def fenced(current: int | None, environment_id: str, fence: int | None, what: str) -> bool:
    """Whether a write carrying the lock token ``fence`` comes from a job run that
    no longer holds the environment's lock, whose token is ``current`` (a newer
    grant, or an abandon, raised it since): such writes are dropped, and said so
    (``what`` was dropped).  Writes without a token (no lock table at the
    conductor, 0.2 senders) are taken as they come."""
    if fence is None or current is None or fence >= current:
        return False
    LOG.warning("%s dropped: sent by a run that lost the lock of environment %s (token %s, "
                "now %s)", what, environment_id, fence, current)
    return True
