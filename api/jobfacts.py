"""What storing a job's reports, events and result needs of the job, read
without its large columns.

A job's row holds its masked model (``description``, hundreds of KB at a
thousand units), its ``parameters`` and its node states (``nodes``, 50 KB at
a thousand units); storing a batch of reports needs none of them, only who
the job is (its environment, project, session, action), whether it still
runs (its ``state``, ``finished``) and the environment's lock token
(:mod:`fornace.api.fencing`).  Loading the whole row decoded those JSON
columns for every report: half the API's CPU during a large deployment.

The facts are read once per batch, in one query joined with the lock
table, never kept from one batch to the next: another API process may end
the job (its result, an abandon) or a conductor take the lock over at any
moment, and whether a report still belongs is decided on what the database
says now.  What does not change while a job runs (its secrets) is kept
apart, bounded (:mod:`fornace.api.jobsecrets`).
"""
from __future__ import annotations

import datetime
import functools
from dataclasses import dataclass
from typing import Any, Iterable

from sqlalchemy import bindparam, case, select
from sqlalchemy.orm import Session as DbSession, load_only

from fornace.api.ids import could_be_id
from fornace.common.db.models import Job, JobLock

# the columns of a job the stores read to store what its run sends (no JSON)
LIGHT_COLUMNS = (Job.id, Job.environment_id, Job.tenant_id, Job.session_id, Job.kind,
                 Job.state, Job.started, Job.finished)
# the same as ORM loader options, for the stores that change the job's row
LIGHT_JOB = [load_only(*LIGHT_COLUMNS)]


@dataclass
class JobFacts:
    """A job as a batch of what its run sends needs it; ``token``: its
    environment's lock token when the batch began (None: no lock row)."""

    id: str
    environment_id: str
    tenant_id: str
    session_id: str | None
    kind: str
    state: str
    started: datetime.datetime
    finished: datetime.datetime | None
    token: int | None


def _facts() -> select:
    return select(*LIGHT_COLUMNS, JobLock.token).outerjoin(
        JobLock, JobLock.environment_id == Job.environment_id)


def jobs_by_id(db: DbSession, job_ids: Iterable[str]) -> dict[str, JobFacts]:
    """The facts of the named jobs that exist, in one query."""
    wanted = sorted({job_id for job_id in job_ids if could_be_id(job_id)})
    if not wanted:
        return {}
    rows = (db.execute(_by_ids(False), {"job_id": wanted[0]}) if len(wanted) == 1
            else db.execute(_by_ids(True), {"job_ids": wanted}))
    return {row.id: JobFacts(*row) for row in rows}


@functools.lru_cache(maxsize=2)
def _by_ids(many: bool) -> Any:
    """:func:`jobs_by_id`'s read, built once (:mod:`fornace.common.db.prepared`):
    of one job (a batch's events are mostly one job's), or an expanding IN."""
    if not many:
        return _facts().where(Job.id == bindparam("job_id"))
    return _facts().where(Job.id.in_(bindparam("job_ids", expanding=True)))


def current_job(db: DbSession, env_id: str) -> JobFacts | None:
    """The environment's job that has not ended (the latest, should there be
    two), else its latest job; None when it has none."""
    if not could_be_id(env_id):
        return None
    row = db.execute(_facts().where(Job.environment_id == env_id).order_by(
        case((Job.finished.is_(None), 0), else_=1), Job.started.desc()).limit(1)).first()
    return JobFacts(*row) if row is not None else None
