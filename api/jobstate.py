"""A job's hold on its environment: the running job, the busy conflict, and
what a job's end leaves behind (its open tasks, its session, the
environment's state).

One conflict rule: a call that would change a busy environment (one whose
job runs: open a session, edit its services, deploy, rename, delete without
abandon, run an action) is a 409 naming the running job (:func:`busy_error`).
"""
from __future__ import annotations

import datetime
import functools
from typing import Any, Sequence

from sqlalchemy import Select, bindparam, select, update
from sqlalchemy.orm import Session as DbSession

from fornace.api.errors import Conflict
from fornace.api.views import utc
from fornace.common.db.models import NOT_DEPLOYING, ConfigSession, Job, Environment, JobTask

BUSY = ("deploying", "deleting")
UNSETTLED = ("pending", "running")


def _latest_unfinished(query: Select, env_id: str) -> Select:
    """``query`` (of jobs) narrowed to the environment's jobs that have not ended,
    the latest first (should there be two)."""
    return query.where(Job.environment_id == env_id, Job.finished.is_(None)).order_by(
        Job.started.desc())


def running_job(db: DbSession, env_id: str, options: Sequence[Any] = ()) -> Job | None:
    """The environment's job that has not ended (the latest, should there be two);
    ``options``: loader options (:data:`fornace.api.jobfacts.LIGHT_JOB`: not its JSON)."""
    return db.scalars(_latest_unfinished(select(Job), env_id).options(*options)).first()


def first_deployment_model(db: DbSession, env_id: str, version: int,
                           state: str) -> dict[str, Any] | None:
    """While an environment's first deployment runs, the model it deploys (its
    secrets masked, as jobs store them): the environment has no deployed services
    yet, those are what it is getting.  None otherwise (no job, or one after the
    first deployment: the deployed model is the environment's)."""
    if version != 0 or state != "deploying":
        return None
    # its column only (no ORM object: the environment's view reads rows, not objects)
    found = db.execute(_latest_unfinished(select(Job.description), env_id).limit(1)).scalar()
    return found if isinstance(found, dict) else None


def busy_message(env_name: str, job: Job) -> str:
    return (f"environment {env_name} is busy: job {job.id} ({job.kind}) {job.state} since "
            f"{utc(job.started)}; wait for it to end or abandon it")


def busy_error(db: DbSession, env: Environment) -> Conflict:
    """The 409 of a change refused because ``env`` runs a job: the message and the
    error's ``job`` and ``environment`` fields name them (the command line builds
    its own advice from those)."""
    where = {"id": env.id, "name": env.name}
    job = running_job(db, env.id)
    if job is None:     # the state says busy, yet no job runs: say what is known
        return Conflict(f"environment {env.name} is {env.state}; wait for it to end",
                        environment=where)
    return Conflict(busy_message(env.name, job), environment=where,
                    job={"id": job.id, "kind": job.kind, "started": utc(job.started)})


def refuse_if_busy(db: DbSession, env: Environment) -> None:
    """A 409 naming the running job when ``env`` is busy (deploying, deleting)."""
    if env.state in BUSY:
        raise busy_error(db, env)


def settled_state(db: DbSession, env_id: str, job_id: str) -> str:
    """The state of an environment after a job that deployed nothing (a plan, a
    check, an operation, a refused job, an abandoned plan): what the last job
    that did deploy left."""
    last = db.execute(select(Job.state, Job.kind).where(
        Job.environment_id == env_id, Job.id != job_id,
        Job.finished.is_not(None), Job.kind.not_in(NOT_DEPLOYING),
        Job.state != "refused").order_by(Job.started.desc()).limit(1)).first()
    if last is None or last.state not in ("completed_w_errors", "abandoned"):
        return "ready"
    return "delete failure" if last.kind == "delete" else "deploy failure"


def settle_tasks(db: DbSession, job_id: str, job_state: str, now: datetime.datetime) -> int:
    """Close the task rows a job left open when it ends (``job_state``; a
    conductor that died or lost its lock never finished them): ``cancelled``,
    with why; how many.  A plain UPDATE of the table: task rows loaded in the
    session are not refreshed."""
    return db.execute(_settle_statement(), {
        "job_id": job_id, "now": now,
        "b_summary": f"superseded: job {job_id} ended ({job_state}) while this task was "
                   f"still open (the run that started it stopped)"}).rowcount


@functools.cache
def _settle_statement() -> Any:
    """:func:`settle_tasks`'s UPDATE, built once (:mod:`fornace.common.db.prepared`)."""
    tasks = JobTask.__table__
    now = bindparam("now", type_=tasks.c.updated.type)
    return update(tasks).where(
        tasks.c.deployment_id == bindparam("job_id"), tasks.c.status.in_(UNSETTLED)).values(
        status="cancelled", finished=now, updated=now, summary=bindparam("b_summary"))


def reopen_session(db: DbSession, job: Job, now: datetime.datetime) -> None:
    """The session of a job that did not run to its end can be deployed again
    (the environment's version did not change)."""
    if job.session_id:
        db.execute(update(ConfigSession).where(
            ConfigSession.id == job.session_id, ConfigSession.state == "deploying").values(
            state="open", updated=now))
