"""Bounded history: what ``fornace db purge`` and the conductors' periodic purge
(``[database] history_days``) remove, and removing it in small batches.

History is what ended jobs leave: their rows in ``deployments`` and, with
them, their reports (``statuses``), task records (``job_tasks``), trace
(``job_traces``), the ids of the events stored (``job_event_ids``) and the
configuration session they deployed (``sessions`` of state ``deployed``, a
copy of the model each); and dead letters.  A job is
history when it ended (``finished`` is set: never a running or queued job)
before the cut-off, and either its environment is gone or it is none of what
its environment still shows, among the jobs of that environment that ended:

- its latest job (``fornace status``'s and ``/status``'s reports, the
  deployments list never empty);
- its latest job that deployed (not a ``plan``, ``check`` or operation, not
  refused): the environment's state after a plan is what that one left;
- its latest job with a trace (the trace and workflow pages, ``fornace trace``).

Each of those is "latest among the ended jobs", so a job found to be history
stays history: a job that starts meanwhile is no ended job (the one it
supersedes is kept until it ends), and the API deletes no ended job but with
its environment.  Several purges may run at once (the command and a
conductor): each statement deletes what is still there, each counts what it
deleted.  Change detection reads the environment's model, never its jobs.

Not history: environments, open or deploying sessions, packages and pins,
the job locks (their fencing tokens) and the agent queues written down for
``fornace gc``.

Every statement deletes at most a batch of rows in its own transaction, by
primary key: no table lock and no long transaction holds back the API or the
conductors on a busy PostgreSQL.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Callable

from sqlalchemy import and_, delete, exists, func, literal, or_, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import aliased

from fornace.common.db.models import (NOT_DEPLOYING, ConfigSession, DeadLetter, Environment,
                                      Job, JobEventId, JobTask, JobTrace, Status, utcnow)

#: the tables purged, in the order they are reported (a job's own rows first)
TABLES = ("deployments", "statuses", "job_tasks", "job_traces", "job_event_ids", "sessions",
          "dead_letters")
#: what each table holds, for the people reading the counts
MEANING = {"deployments": "jobs", "statuses": "reports", "job_tasks": "task records",
           "job_traces": "traces", "job_event_ids": "event ids", "sessions": "deployed sessions",
           "dead_letters": "dead letters"}
#: the tables of a job's own rows: (table, its key column, how many a statement deletes);
#: a trace is up to a few MB: a few at a time
_JOB_ROWS = ((Status.__table__, "id", 2000), (JobTask.__table__, "id", 2000),
             (JobTrace.__table__, "deployment_id", 20), (JobEventId.__table__, "key", 2000))
JOBS_PER_BATCH = 200
ROWS_PER_BATCH = 2000


@dataclass(frozen=True)
class Cutoff:
    """History older than ``days`` days as of ``now`` (UTC, naive: as stored)."""

    days: int
    now: datetime.datetime = field(default_factory=utcnow)

    @property
    def before(self) -> datetime.datetime:
        try:
            return self.now - datetime.timedelta(days=self.days)
        except OverflowError:   # more days than the calendar has: nothing is that old
            return datetime.datetime.min


def job_is_history(job: Any, before: datetime.datetime) -> Any:
    """The condition that the job ``job`` (:class:`Job` or an alias of it) is
    history (see the module's text)."""
    other = aliased(Job)

    def newer_ended(*also: Any) -> Any:
        return select(literal(1)).select_from(other).where(
            other.environment_id == job.environment_id, other.finished.is_not(None),
            other.started > job.started, *also).exists()

    def deployed(row: Any) -> Any:
        return and_(row.kind.not_in(NOT_DEPLOYING), row.state != "refused")

    def traced(row: Any) -> Any:
        return exists().where(JobTrace.deployment_id == row.id)

    superseded = and_(newer_ended(),
                      or_(~deployed(job), newer_ended(deployed(other))),
                      or_(~traced(job), newer_ended(traced(other))))
    gone = ~exists().where(Environment.id == job.environment_id)
    return and_(job.finished.is_not(None), job.finished < before, or_(gone, superseded))


def _sessions_of(jobs: Any) -> Any:
    """The deployed sessions of ``jobs`` (a select of job ids): a session is
    deployed by one job, whose end marks it ``deployed``."""
    job = aliased(Job)
    return and_(ConfigSession.state == "deployed", ConfigSession.id.in_(
        select(job.session_id).where(job.id.in_(jobs), job.session_id.is_not(None))))


def _dead_letter_is_history(before: datetime.datetime) -> Any:
    """A dead letter set aside before ``before`` whose job (if any) is not running."""
    running = exists().where(Job.id == DeadLetter.job_id, Job.finished.is_(None))
    return and_(DeadLetter.created < before, or_(DeadLetter.job_id.is_(None), ~running))


def _history_jobs(before: datetime.datetime) -> Any:
    return select(Job.id).where(job_is_history(Job, before))


def count(connection: Connection, cutoff: Cutoff) -> dict[str, int]:
    """How many rows of each table (:data:`TABLES`) are history now."""
    before = cutoff.before
    jobs = _history_jobs(before)
    counts = {"deployments": _count(connection, select(func.count()).select_from(
        jobs.subquery()))}
    for table, _key, _per in _JOB_ROWS:
        counts[table.name] = _count(connection, select(func.count()).select_from(table).where(
            table.c.deployment_id.in_(jobs)))
    counts["sessions"] = _count(connection, select(func.count()).select_from(
        ConfigSession).where(_sessions_of(jobs)))
    counts["dead_letters"] = _count(connection, select(func.count()).select_from(
        DeadLetter).where(_dead_letter_is_history(before)))
    return counts


def _count(connection: Connection, statement: Any) -> int:
    return int(connection.scalar(statement) or 0)


def purge(engine: Engine, cutoff: Cutoff, stop: Callable[[], bool] = lambda: False,
          jobs_per_batch: int = JOBS_PER_BATCH) -> dict[str, int]:
    """Remove what is history (:func:`count`'s rows), batch by batch, each in
    its own short transaction; how many rows of each table were removed.
    ``stop()`` true: stop after the current batch (a conductor stopping)."""
    before = cutoff.before
    removed = dict.fromkeys(TABLES, 0)
    while not stop():
        with engine.connect() as connection:
            # no order: the scan stops at the batch's last job found
            ids = list(connection.scalars(_history_jobs(before).limit(jobs_per_batch)))
        if not ids:
            break
        for table, key, per in _JOB_ROWS:   # a job's rows first: each batch bounded
            removed[table.name] += _delete(engine, table.c[key], per,
                                           table.c.deployment_id.in_(ids))
        removed["sessions"] += _delete(engine, ConfigSession.__table__.c.id, ROWS_PER_BATCH,
                                       _sessions_of(ids))
        removed["deployments"] += _delete(engine, Job.__table__.c.id, len(ids),
                                          Job.__table__.c.id.in_(ids))
        if len(ids) < jobs_per_batch:
            break
    if not stop():
        removed["dead_letters"] = _delete(engine, DeadLetter.__table__.c.id, ROWS_PER_BATCH,
                                          _dead_letter_is_history(before), stop)
    return removed


def _delete(engine: Engine, key: Any, per: int, where: Any,
            stop: Callable[[], bool] = lambda: False) -> int:
    """Delete the rows of ``key``'s table matching ``where``, at most ``per``
    of them per transaction; how many."""
    total = 0
    statement = delete(key.table).where(key.in_(select(key).where(where).limit(per)))
    while True:
        with engine.begin() as connection:
            deleted = connection.execute(statement).rowcount
        total += deleted
        # fewer than a batch: none was left (another purge may have taken some);
        # no statement more to find nothing
        if deleted < per or stop():
            return total
