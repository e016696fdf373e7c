"""Reports: what the conductor says of a job as it runs (``task-reports``),
stored as ``statuses`` rows, and the Murano 0.2 views of them: the
deployments of an environment, a deployment's reports, the last status of
each service.

Reports come in batches (:mod:`fornace.api.messagestore`): stored in one
transaction, masked with their job's secrets, once each (a redelivered
report is not stored again), dropped when their run lost the environment's
lock (:mod:`fornace.api.fencing`) or their job was abandoned.
"""
from __future__ import annotations

import datetime
import functools
import logging
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session as DbSession

from fornace.api.context import Context
from fornace.api.errors import NotFound
from fornace.api.fencing import fenced
from fornace.api.ids import could_be_id, lookup_id
from fornace.api.jobfacts import JobFacts, current_job, jobs_by_id
from fornace.api.jobsecrets import SecretKeys, job_secrets
from fornace.api.jobstate import NOT_DEPLOYING
from fornace.api.messagestore import (Message, Outcome, store_message, store_messages,
                                      store_packed)
from fornace.api.views import deployment_view, report_view
from fornace.common import contract
from fornace.common.db.inserts import insert_rows
from fornace.common.db.models import Job, Environment, Status, new_id, utcnow
from fornace.common.secrets import mask_text, masked

if TYPE_CHECKING:
    from fornace.api.stores.store import Store

LOG = logging.getLogger(__name__)

Parsed = tuple[contract.Report, int | None, str | None]   # (report, fence, message id)


class Reports:
    """The reports of ``store``'s jobs, and the 0.2 deployments they belong to."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._sessions = store.sessions

    # -- reading ---------------------------------------------------------------
    def deployments(self, ctx: Context, env_id: str | None = None) -> list[dict[str, Any]]:
        """The jobs of the caller's project (of one environment), as 0.2 deployments."""
        with self._sessions() as db:
            query = select(Job).where(Job.tenant_id == ctx.tenant_id)
            if env_id is not None:
                self.store.environment(db, ctx, env_id)
                query = query.where(Job.environment_id == env_id)
            keys: dict[str, frozenset[str]] = {}   # per environment
            shown = []
            for job in db.scalars(query.order_by(Job.started.desc())):
                if job.environment_id not in keys:
                    keys[job.environment_id] = self.store.secret_keys(db, job.environment_id)
                shown.append(deployment_view(job, keys[job.environment_id]))
            return shown

    def of_deployment(self, ctx: Context, env_id: str, deployment_id: str,
                      service_ids: list[str]) -> list[dict[str, Any]]:
        """A deployment's reports (of the given services and their units), in order."""
        with self._sessions() as db:
            env = self.store.environment(db, ctx, env_id)
            deployment = db.get(Job, lookup_id(deployment_id, "deployment"))
            if deployment is None or deployment.environment_id != env.id:
                raise NotFound(f"deployment {deployment_id} not found in environment {env_id}")
            query = select(Status).where(Status.deployment_id == deployment.id)
            if service_ids:
                query = query.where(Status.entity_id.in_(
                    {i for i in _entities_of(deployment.description, service_ids)
                     if could_be_id(i)}))
            return [report_view(s) for s in db.scalars(query.order_by(Status.created))]

    def last_status(self, ctx: Context, env_id: str,
                    session_id: str | None = None) -> dict[str, Any]:
        """Per entity (service, unit) the last report of the latest job."""
        with self._sessions() as db:
            env = self.store.environment(db, ctx, env_id)
            if session_id:
                self.store.config_session(db, ctx, env, session_id, editable=False)
            deployment = db.scalars(select(Job).where(
                Job.environment_id == env.id).order_by(
                Job.started.desc())).first()
            latest: dict[str, Any] = {}
            if deployment is not None:
                for status in db.scalars(select(Status).where(
                        Status.deployment_id == deployment.id).order_by(Status.created)):
                    if status.entity_id:
                        latest[status.entity_id] = report_view(status)
            return latest

    # -- from the conductor ------------------------------------------------------
    def add(self, body: Any, message_id: str | None) -> None:
        """Store a status row (task-reports); a redelivered report is stored once."""
        store_message(self.add_all, body, message_id)

    def add_all(self, messages: Sequence[Message]) -> list[Outcome]:
        """Store reports (``[(body, message id)]``, in arrival order) in one
        transaction: a consumer storing them one by one spends its time on
        transactions and lookups (lock token, job, secrets) that a batch shares.
        One outcome per message (:func:`fornace.api.messagestore.store_messages`);
        a pack of reports (contract 1.12) is stored as the reports it holds."""
        return store_packed(messages, contract.unpack_reports, lambda reports: store_messages(
            reports, _parse, self._store_reports, self._store_report, "reports"))

    def _store_report(self, report: Parsed) -> None:
        try:
            self._store_reports([report])
        except IntegrityError:  # the same report stored by a concurrent consumer
            LOG.info("report %s already stored", report[2])

    def _store_reports(self, reports: Sequence[Parsed]) -> None:
        with self._sessions.begin() as db:
            jobs = _report_jobs(db, reports)
            seen = stored_message_ids(db, [message_id for _, _, message_id in reports])
            secrets: dict[str, set[str]] = {}
            rows: list[dict[str, Any]] = []
            for report, fence, message_id in reports:
                job = jobs.get(_job_key(report, message_id))
                if job is not None and fenced(job.token, report.environment_id, fence,
                                              f"report {message_id}"):
                    continue
                if message_id and message_id in seen:
                    continue
                row = _status_row(db, job, report, message_id, secrets,
                                  self.store.secret_keys)
                if row is not None:
                    rows.append(row)
                    seen.add(message_id)
            # in arrival order, whatever the clock's resolution: reports are listed by time
            now = utcnow()
            for number, row in enumerate(rows):
                row["created"] = row["updated"] = now + datetime.timedelta(microseconds=number)
            # no ORM objects: a unit of work per row cost more than the insert
            insert_rows(db, Status.__table__, rows)


def _parse(body: Any, message_id: str | None) -> Parsed:
    """A report as the contract reads it; one whose text or details hold a NUL
    (no PostgreSQL text column holds it) is set aside here, on every backend,
    rather than failing its batch's transaction and the reports beside it."""
    report = contract.parse_report(body)
    for name in ("text", "details"):
        value = getattr(report, name)
        if isinstance(value, str) and "\x00" in value:
            raise contract.ContractError(f"report message: field {name!r} holds a NUL "
                                         f"(U+0000), which the database cannot store")
    return report, contract.fence_of(body, "report"), message_id


def stored_message_ids(db: DbSession, message_ids: Iterable[str | None]) -> set[str | None]:
    """Which of these reports are stored already (redelivered), in one query."""
    wanted = {message_id for message_id in message_ids if message_id}
    if not wanted:
        return set()
    return set(db.scalars(_stored_ids_query(), {"message_ids": sorted(wanted)}))


@functools.cache
def _stored_ids_query() -> Any:
    """:func:`stored_message_ids`' read, built once (:mod:`fornace.common.db.prepared`)."""
    return select(Status.message_id).where(
        Status.message_id.in_(bindparam("message_ids", expanding=True)))


def _status_row(db: DbSession, deployment: JobFacts | None, report: contract.Report,
                message_id: str | None, secrets: dict[str, set[str]],
                secret_keys: SecretKeys) -> dict[str, Any] | None:
    """The status row of a report of ``deployment`` (None: dropped, and said
    why); ``secrets`` caches each job's secrets for the batch."""
    if deployment is None:
        LOG.info("report %s for unknown environment %s dropped", message_id,
                 report.environment_id)
        return None
    if deployment.state == "abandoned":
        LOG.info("report %s of abandoned job %s ignored", message_id, deployment.id)
        return None
    if deployment.id not in secrets:
        secrets[deployment.id] = job_secrets(db, deployment, secret_keys)
    known = secrets[deployment.id]
    details = report.details
    if details is not None and not isinstance(details, str):
        details = str(masked(details, known))
    if report.level == "error" and deployment.state == "success":
        _late_error(db, deployment)
    return {"id": new_id(), "deployment_id": deployment.id, "message_id": message_id,
            "entity": report.entity,
            "entity_id": None if report.id is None else str(report.id),
            "text": mask_text(report.text, known),
            "details": mask_text(details, known) if details else details,
            "level": report.level}


def _named_job(message_id: str | None) -> str | None:
    """The job a report's message id names: the conductor names reports
    ``<job id>-report-<n>``."""
    if message_id and "-report-" in message_id:
        job_id = message_id.rsplit("-report-", 1)[0]
        if could_be_id(job_id):
            return job_id
    return None


def _job_key(report: contract.Report, message_id: str | None) -> tuple[str, str | None]:
    return report.environment_id, _named_job(message_id)


def _report_jobs(db: DbSession, reports: Sequence[Parsed]
                 ) -> dict[tuple[str, str | None], JobFacts | None]:
    """The job each report belongs to, by (environment, named job): the job its
    message id names, when it is one of the environment's (so a late report of
    an abandoned job is not pinned on the job that runs now); else the running
    or the latest job of the environment.  One query for the named jobs, one
    per environment whose reports name none of its jobs."""
    keys = {_job_key(report, message_id) for report, _, message_id in reports}
    named = jobs_by_id(db, [job_id for _, job_id in keys if job_id])
    found: dict[tuple[str, str | None], JobFacts | None] = {}
    current: dict[str, JobFacts | None] = {}
    for env_id, job_id in keys:
        job = named.get(job_id) if job_id else None
        if job is None or job.environment_id != env_id:
            if env_id not in current:
                current[env_id] = current_job(db, env_id)
            job = current[env_id]
        found[env_id, job_id] = job
    return found


def _late_error(db: DbSession, deployment: JobFacts) -> None:
    """An error report that arrived after the result (two queues, no common order)."""
    deployment.state = "completed_w_errors"     # for the reports after it in the batch
    db.execute(update(Job).where(Job.id == deployment.id, Job.state == "success").values(
        state="completed_w_errors"))
    if deployment.kind != "delete" and deployment.kind not in NOT_DEPLOYING:
        db.execute(update(Environment).where(
            Environment.id == deployment.environment_id,
            Environment.state == "ready").values(state="deploy failure"))


def _entities_of(description: dict, service_ids: list[str]) -> set[str]:
    """The given services and their units (reports name either)."""
    wanted = set(service_ids)
    for service in description.get("services") or []:
        if isinstance(service, dict) and service.get("id") in service_ids:
            for unit in service.get("units") or []:
                if isinstance(unit, dict) and unit.get("id"):
                    wanted.add(unit["id"])
    return wanted
