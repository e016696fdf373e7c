"""Results: the final model a job sends back (``task-results``), which ends
the job and updates its environment.

Every job but a ``plan`` stores the model and bumps the version (open
sessions then become invalid: they were opened on what the job changed); a
plan only previews, so the environment is left as it was.  A delete job
that went well removes the environment.  A redelivered result, one for a
job that ended already, or one from a run that lost the environment's lock
(:mod:`fornace.api.fencing`) changes nothing.

A job that sent error reports ends ``completed_w_errors``: the result says
how many it sent (contract 1.11), since they travel on another queue and may
be stored after it; a result that does not say (0.2) counts those stored.
"""
from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, Sequence

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session as DbSession, defer

from fornace.api.fencing import fenced
from fornace.api.jobfacts import LIGHT_JOB
from fornace.api.jobstate import NOT_DEPLOYING, running_job, settle_tasks, settled_state
from fornace.api.messagestore import Message, Outcome, store_message, store_messages
from fornace.api.notices import Notice, job_ended
from fornace.common import contract
from fornace.common.db.prepared import update_row
from fornace.common.db.models import (ConfigSession, Job, JobLock, Environment, Status,
                                      utcnow)

if TYPE_CHECKING:
    from fornace.api.stores.store import Store

LOG = logging.getLogger(__name__)

# (model, fence, error reports the job sent, message id)
Parsed = tuple[dict[str, Any], int | None, int, str | None]


class Results:
    """The results of ``store``'s jobs."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._sessions = store.sessions

    def apply(self, body: Any, message_id: str | None) -> None:
        """Store a final model (task-results); a redelivered result changes nothing."""
        store_message(self.apply_all, body, message_id)

    def apply_all(self, messages: Sequence[Message]) -> list[Outcome]:
        """Store results (``[(body, message id)]``, in arrival order), one outcome
        each (:func:`fornace.api.messagestore.store_messages`)."""
        return store_messages(messages, _parse, self._store_results,
                              lambda result: self._store_results([result]), "results")

    def _store_results(self, results: Sequence[Parsed]) -> None:
        ended: list[Notice] | None = [] if self.store.notifications.enabled else None
        with self._sessions.begin() as db:
            for model, fence, error_reports, message_id in results:
                _store_result(db, model, fence, error_reports, message_id, ended=ended)
        for notice in ended or ():   # committed: the jobs ended
            self.store.notify(None, notice.event_type, notice.payload, notice.error)


def _parse(body: Any, message_id: str | None) -> Parsed:
    return (contract.parse_result(body), contract.fence_of(body, "result"),
            contract.error_reports_of(body), message_id)


def _error_count(job_id: Any) -> Any:
    """The error reports stored for the job ``job_id`` (a value or a column)."""
    return (select(func.count()).select_from(Status)
            .where(Status.deployment_id == job_id, Status.level == "error")
            .scalar_subquery())


def _token(env_id: Any) -> Any:
    """The lock token of the environment ``env_id`` (a value or a bound parameter)."""
    return select(JobLock.token).where(JobLock.environment_id == env_id).scalar_subquery()


@functools.cache
def _named_job_query() -> Any:
    """The read of a result that names its job (:func:`_job_of`), built once."""
    return (select(_token(bindparam("env_id")), Job, Environment, _error_count(Job.id))
            .outerjoin(Environment, Environment.id == Job.environment_id)
            .where(Job.id == bindparam("job_id"))
            .options(*LIGHT_JOB, defer(Environment.description))
            # a later result of the batch sees what an earlier one wrote
            .execution_options(populate_existing=True))


def _job_of(db: DbSession, env_id: str, message_id: str | None
            ) -> tuple[int | None, Job | None, Environment | None, int]:
    """What storing a result reads, in one query when it names its job (as
    conductors do): the environment's lock token, the job and its environment
    (neither's JSON: the model replaces the latter), the job's stored error
    reports."""
    if message_id:
        row = db.execute(_named_job_query(), {"env_id": env_id, "job_id": message_id}).first()
        if row is not None:
            return row[0], row[1], row[2], row[3]
    current = db.scalar(select(_token(env_id)))
    deployment = running_job(db, env_id, LIGHT_JOB)
    if deployment is None:
        return current, None, None, 0
    env = db.get(Environment, deployment.environment_id,
                 options=[defer(Environment.description)], populate_existing=True)
    return current, deployment, env, db.scalar(select(_error_count(deployment.id)))


def _store_result(db: DbSession, model: dict[str, Any], fence: int | None,
                  error_reports: int, message_id: str | None,
                  ended: list[Notice] | None = None) -> None:
    """Store one result; the notice of the job it ends goes to ``ended`` (None:
    notifications are off)."""
    token, deployment, env, stored_errors = _job_of(db, model["id"], message_id)
    if fenced(token, model["id"], fence, f"result {message_id}"):
        return
    if deployment is None or deployment.finished is not None:
        LOG.info("result %s for environment %s: no running deployment, ignored",
                 message_id, model["id"])
        return
    # the job's count first: its last reports may not be stored yet (another queue)
    errors = error_reports or stored_errors
    now = utcnow()
    # plain UPDATEs, not changes to the loaded objects: no unit of work to flush
    # (_job_of reads them again, should a later result of the batch name them)
    state = "completed_w_errors" if errors else "success"
    update_row(db, Job, deployment.id, finished=now, updated=now, state=state)
    settle_tasks(db, deployment.id, state, now)
    if env is None:
        return
    if ended is not None:
        ended.append(job_ended(db, env, deployment, state, now))
    if deployment.kind == "delete":
        if errors:
            update_row(db, Environment, env.id, state="delete failure", updated=now)
        else:
            db.delete(env)
        return
    if deployment.kind == "plan":
        update_row(db, Environment, env.id,
                   state=settled_state(db, env.id, deployment.id), updated=now)
        return
    update_row(db, Environment, env.id, increments=("version",), description=model,
               state=(settled_state(db, env.id, deployment.id)
                      if deployment.kind in NOT_DEPLOYING
                      else "deploy failure" if errors else "ready"),
               updated=now)
    if deployment.session_id:
        update_row(db, ConfigSession, deployment.session_id, state="deployed", updated=now)
