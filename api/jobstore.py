"""Jobs: lifecycle actions on environments, their tasks, topology and status.

A job is a row of ``deployments`` (its ``kind`` is the action).  Besides the
0.2 session deploy and environment delete (in :mod:`fornace.api.store`), users run
the other actions of :data:`fornace.common.contract.ACTIONS` on a deployed
environment; the conductor sends what each job does, task by task, on the
``job-events`` queue and this module keeps those tasks (many events in one
transaction: see :meth:`Jobs.apply_job_events`).

One job at a time per environment: a job is refused (409, naming the job
that runs) rather than queued behind another, as Unfurl refuses a job when
the ensemble is locked; a stuck job can be abandoned.
"""
from __future__ import annotations

import datetime
import functools
import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from sqlalchemy import bindparam, func, insert, select, tuple_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session as DbSession

from fornace.common import contract, topology
from fornace.common.actionparams import ActionError, check_parameters, select_units
from fornace.common.modelview import service_type
from fornace.common.db import locks
from fornace.common.secrets import find_secrets, mask_text, masked

from fornace.common.db.models import (ConfigSession, Deployment, Environment, JobTask, JobTrace,
                                      Status, new_id, utcnow)
from fornace.api.errors import BadRequest, Conflict, NotFound
from fornace.api.outputs import endpoints, environment_outputs
from fornace.api.store import (BUSY, LIGHT_JOB, NOT_DEPLOYING, Context, Outcome, Store,
                               could_be_id, fenced, iso, job_secrets, lock_tokens, lookup_id,
                               keep_trust, running_job, settle_tasks, settled_state,
                               store_all)
from fornace.api.traces import BadTrace, store_trace, trace_view
from fornace.api.packages.usage import task_packages
from fornace.common.catalog import Catalog
from fornace.api.trusts import Delegation

LOG = logging.getLogger(__name__)

# the actions users start through POST .../actions/{name}; deploy and delete
# have their own 0.2 routes (session deploy, environment delete)
USER_ACTIONS = tuple(a for a in contract.ACTIONS if a not in ("deploy", "delete"))
UNDEPLOYED_ACTIONS = ("plan",)  # may run before the first deployment

TSV_COLUMNS = ("change_id", "job_id", "action", "status", "reason", "target", "target_name",
               "operation", "started", "finished", "summary")
# longest value of each text column of job_tasks (longer: the event is malformed)
_LIMITS = {"change_id": 64, "target": 255, "target_name": 255, "operation": 255,
           "reason": 64, "digest": 128}
_TEXT_FIELDS = ("target", "target_name", "operation", "reason", "status", "summary", "digest")


# -- views ---------------------------------------------------------------------------

def job_view(job: Deployment, counts: dict[str, int] | None = None) -> dict[str, Any]:
    # stored masked (kept_parameters); masked again on the way out, as service fields
    # are: a row written by an older version or another writer leaks no secret either
    return {"id": job.id, "environment_id": job.environment_id, "action": job.kind,
            "parameters": masked(job.parameters or {}), "state": job.state,
            "started": iso(job.started), "finished": iso(job.finished),
            "created": iso(job.created), "updated": iso(job.updated),
            "task_counts": counts or {}}


def kept_parameters(parameters: dict[str, Any], description: Any) -> dict[str, Any]:
    """What a job stores (and shows) of its parameters: every secret field masked
    (``adminPassword``, ``token``, ... at any depth), and the environment's secrets
    and the parameters' own wherever a value quotes them (a command line)."""
    return masked(parameters, find_secrets(parameters, find_secrets(description)))


def task_view(task: JobTask) -> dict[str, Any]:
    return {"change_id": task.change_id, "target": task.target,
            "target_name": task.target_name, "operation": task.operation,
            "reason": task.reason, "status": task.status, "started": iso(task.started),
            "finished": iso(task.finished), "summary": task.summary, "digest": task.digest,
            "log": task.log.split("\n") if task.log else []}


def tsv_field(value: Any) -> str:
    """One TSV cell: None is empty; backslash, tab and line breaks escaped."""
    if value is None:
        return ""
    if isinstance(value, datetime.datetime):
        value = iso(value)
    return (str(value).replace("\\", "\\\\").replace("\t", "\\t")
            .replace("\n", "\\n").replace("\r", "\\r"))


def tsv(rows: Iterable[Iterable[Any]]) -> str:
    lines = ["\t".join(TSV_COLUMNS)]
    lines.extend("\t".join(tsv_field(value) for value in row) for row in rows)
    return "\n".join(lines) + "\n"


def _default_status(deployed: bool) -> dict[str, Any]:
    """What a unit or service without a conductor-kept status shows: not created
    yet before the first deployment; after it, nobody knows."""
    return {"local": "unknown" if deployed else "pending", "state": "initial"}


def _with_status(item: dict[str, Any], deployed: bool,
                 live: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    status = item.get("status")
    shown = masked(status) if isinstance(status, dict) else _default_status(deployed)
    now = (live or {}).get(str(item.get("id")))
    if now:   # what the running job told since it began
        shown.update({k: v for k, v in now.items() if k in ("state", "local") and v})
    return shown


def status_view(description: dict[str, Any], deployed: bool,
                live: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Per service and unit its status; ``live``: the node states a running
    job sent (by id), shown over those of ``description``."""
    services = []
    for service in description.get("services") or []:
        if not isinstance(service, dict):
            continue
        units = [{"id": u.get("id"), "name": u.get("name"),
                  "status": _with_status(u, deployed, live), **endpoints(u)}
                 for u in service.get("units") or [] if isinstance(u, dict)]
        services.append({"id": service.get("id"), "name": service.get("name"),
                         "type": service_type(service),
                         "status": _with_status(service, deployed, live), **endpoints(service),
                         "units": units})
    return services


# -- job events ------------------------------------------------------------------------

class MalformedEvent(ValueError):
    """A task event the contract lets through but the table cannot hold."""


@dataclass
class TaskFields:
    """The columns a task event sets (only those present in it) and its new log lines."""

    values: dict[str, Any]
    lines: list[str]


def _clean(text: str) -> str:
    return text.replace("\x00", "\ufffd")  # PostgreSQL text cannot hold NUL


def _timestamp(name: str, value: str) -> datetime.datetime:
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise MalformedEvent(f"field 'task.{name}' is not an ISO 8601 time") from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return moment


def task_fields(task: dict[str, Any], secrets: set[str]) -> TaskFields:
    """The columns of a task event, checked against the table and masked."""
    values: dict[str, Any] = {}
    for name in _TEXT_FIELDS:
        if name in task:
            value = task[name]
            if isinstance(value, str):
                value = _clean(value)
                if name in _LIMITS and len(value) > _LIMITS[name]:
                    raise MalformedEvent(f"field 'task.{name}' is longer than "
                                         f"{_LIMITS[name]} characters")
            values[name] = value
    if values.get("summary"):
        values["summary"] = mask_text(values["summary"], secrets)
    for name in ("started", "finished"):
        if name in task:
            values[name] = _timestamp(name, task[name]) if task[name] else None
    lines = [mask_text(_clean(line), secrets) for line in task.get("log") or []]
    return TaskFields(values, lines)


def _change_id(task: dict[str, Any]) -> str:
    """The key of a task event's row (MalformedEvent if the column cannot hold it)."""
    change_id = _clean(task["change_id"])
    if len(change_id) > _LIMITS["change_id"]:
        raise MalformedEvent(f"field 'task.change_id' is longer than "
                             f"{_LIMITS['change_id']} characters")
    return change_id


# -- storing job events in batches ------------------------------------------------------

_TASKS = JobTask.__table__
# what a new row holds where no event of the batch set a value
_NEW_ROW = {"target": None, "target_name": None, "operation": None, "reason": None,
            "status": "pending", "started": None, "finished": None, "summary": None,
            "digest": None}
Event = tuple[contract.JobEvent, str | None]   # (event, message id)
# job events that change task rows: one task, or many (contract 1.4)
TASK_KINDS = ("task", "tasks")


def _task_changes(event: contract.JobEvent) -> list[dict[str, Any]]:
    """The task changes a job event carries, in order (none for a job state)."""
    if event.kind == "task":
        return [event.task or {}]
    if event.kind == "tasks":
        return list(event.tasks or [])
    return []


@dataclass
class _TaskWrite:
    """What the events of one batch do to one task row, merged in their order:
    later values win, log lines pile up -- as the same events one by one would."""

    deployment_id: str
    row_id: str | None          # None: the row is new
    values: dict[str, Any] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    def add(self, fields: TaskFields) -> None:
        self.values.update(fields.values)
        self.lines.extend(fields.lines)

    def new_row(self, key: tuple[str, str], row_id: str,
                now: datetime.datetime) -> dict[str, Any]:
        return {**_NEW_ROW, **self.values, "id": row_id, "deployment_id": self.deployment_id,
                "environment_id": key[0], "change_id": key[1],
                "log": "\n".join(self.lines) if self.lines else None,
                "created": now, "updated": now}

    def changes(self, now: datetime.datetime) -> dict[str, Any]:
        """The parameters of :func:`_update_statement` for this row."""
        params = {f"v_{name}": value for name, value in self.values.items()}
        params.update(v_id=self.row_id, v_updated=now)
        if self.lines:
            params["v_log"] = "\n".join(self.lines)
        return params

    @property
    def shape(self) -> tuple[tuple[str, ...], bool]:
        """Rows of one shape are updated by one statement (executemany)."""
        return tuple(sorted(self.values)), bool(self.lines)


@functools.lru_cache(maxsize=256)
def _update_statement(names: tuple[str, ...], with_log: bool) -> Any:
    """UPDATE of the columns ``names`` (and ``updated``) of the row ``v_id``; log
    lines are appended in SQL, so that concurrent appends lose no line."""
    values: dict[str, Any] = {name: bindparam(f"v_{name}", type_=_TASKS.c[name].type)
                              for name in names}
    values["updated"] = bindparam("v_updated", type_=_TASKS.c.updated.type)
    if with_log:
        values["log"] = (func.coalesce(_TASKS.c.log + "\n", "")
                         + bindparam("v_log", type_=_TASKS.c.log.type))
    return update(_TASKS).where(_TASKS.c.id == bindparam("v_id")).values(values)


class _EventBatch:
    """Job events stored in one transaction.

    One event per transaction made the API, not the conductors, the bottleneck
    of large deployments (~3 events per agent command): the job, its lock
    token and its secrets were looked up again for every event, and each task
    row selected and written alone.  A batch looks each job, token and row up
    once, merges the events of each task and writes the rows at the end; a
    ``refused`` job event first writes what came before it, since ending the
    job settles its open tasks.  One event alone is a batch of one: a single
    piece of code stores both.  A ``tasks`` event (many tasks of a job in one
    message, contract 1.4) is stored as its tasks' ``task`` events would be.
    """

    def __init__(self, db: DbSession, events: Sequence[Event]) -> None:
        self.db = db
        self.events = events
        self.jobs = self._jobs()
        self.tokens = lock_tokens(db, {job.environment_id for job in self.jobs.values()}
                                  if any(e.fence is not None for e, _ in events) else ())
        self.rows = self._rows()
        self.secrets: dict[str, set[str]] = {}
        self.writes: dict[tuple[str, str], _TaskWrite] = {}

    @staticmethod
    def _needs_job(event: contract.JobEvent) -> bool:
        """Task events, traces and refusals change rows of their job; the rest is logged."""
        return event.kind in TASK_KINDS or event.kind == "trace" or event.state == "refused"

    def _jobs(self) -> dict[str, Deployment]:
        ids = {e.job_id for e, _ in self.events if self._needs_job(e) and could_be_id(e.job_id)}
        if not ids:
            return {}
        return {job.id: job for job in self.db.scalars(select(Deployment).where(
            Deployment.id.in_(ids)).options(*LIGHT_JOB))}

    def _rows(self) -> dict[tuple[str, str], str]:
        """(environment, change id) -> id of the task rows the batch's events name."""
        keys = set()
        for event, _ in self.events:
            job = self.jobs.get(event.job_id)
            if job is None or job.environment_id != event.environment_id:
                continue
            for task in _task_changes(event):
                try:
                    keys.add((job.environment_id, _change_id(task)))
                except MalformedEvent:
                    continue   # said when the event comes
        if not keys:
            return {}
        found = self.db.execute(select(JobTask.environment_id, JobTask.change_id, JobTask.id)
                                .where(tuple_(JobTask.environment_id, JobTask.change_id)
                                       .in_(sorted(keys))))
        return {(env_id, change_id): row_id for env_id, change_id, row_id in found}

    # -- the events, in order -----------------------------------------------------
    def store(self) -> None:
        for event, message_id in self.events:
            if event.kind in TASK_KINDS:
                self._tasks(event, message_id)
            elif event.kind == "trace":
                self._trace(event, message_id)
            else:
                self._job_state(event, message_id)
        self._write()

    def _job(self, event: contract.JobEvent, message_id: str | None) -> Deployment | None:
        """The event's job; None (and said why) for an unknown one or a stale sender."""
        job = self.jobs.get(event.job_id)
        if job is None or job.environment_id != event.environment_id:
            LOG.info("job event %s for unknown job %.80r of environment %.80r dropped",
                     message_id, event.job_id, event.environment_id)
            return None
        if fenced(self.tokens.get(job.environment_id), job.environment_id, event.fence,
                  f"job event {message_id}"):
            return None
        return job

    def _tasks(self, event: contract.JobEvent, message_id: str | None) -> None:
        job = self._job(event, message_id)
        if job is None:
            return
        for number, task in enumerate(_task_changes(event)):
            try:
                change_id = _change_id(task)
                fields = task_fields(task, self._secrets(job))
            except MalformedEvent as exc:   # that task alone
                which = f" (task {number})" if event.kind == "tasks" else ""
                LOG.warning("job event %s%s of job %s dropped: %s", message_id, which,
                            event.job_id, exc)
                continue
            self._merge(job, change_id, fields)
        if event.nodes:   # contract 1.5: the node states that moved
            job.nodes = {**(job.nodes or {}), **event.nodes}

    def _merge(self, job: Deployment, change_id: str, fields: TaskFields) -> None:
        key = (job.environment_id, change_id)
        write = self.writes.get(key)
        if write is None:
            write = self.writes[key] = _TaskWrite(job.id, self.rows.get(key))
        write.add(fields)

    def _secrets(self, job: Deployment) -> set[str]:
        if job.id not in self.secrets:
            self.secrets[job.id] = job_secrets(self.db, job)
        return self.secrets[job.id]

    def _trace(self, event: contract.JobEvent, message_id: str | None) -> None:
        """A job's trace (contract 1.7): kept compressed, replacing an earlier copy."""
        job = self._job(event, message_id)
        if job is None:
            return
        try:
            stored = store_trace(self.db, job, event.trace or {})
        except contract.ContractError as exc:   # that event alone
            LOG.warning("job event %s (trace of job %s) dropped: %s", message_id, job.id, exc)
            return
        LOG.info("job %s: trace stored (%d bytes, %d compressed)", job.id, stored.size,
                 stored.stored)

    def _job_state(self, event: contract.JobEvent, message_id: str | None) -> None:
        if event.state != "refused":  # results end jobs; the rest is informative
            LOG.debug("job event %s: job %s is %s", message_id, event.job_id, event.state)
            return
        job = self._job(event, message_id)
        if job is None:
            return
        if job.finished is not None:
            LOG.info("job event %s: job %s already ended (%s); refusal ignored",
                     message_id, job.id, job.state)
            return
        self._write()       # the tasks it settles include those of the events before
        _refuse(self.db, job, event.summary)

    # -- writing ------------------------------------------------------------------
    def _write(self) -> None:
        """Insert the new task rows (one executemany) and update the others (one
        executemany per shape of change)."""
        if not self.writes:
            return
        now = utcnow()
        new: list[dict[str, Any]] = []
        changed: dict[tuple[tuple[str, ...], bool], list[dict[str, Any]]] = {}
        for key, write in self.writes.items():
            if write.row_id is None:
                row_id = self.rows[key] = new_id()
                new.append(write.new_row(key, row_id, now))
            else:
                changed.setdefault(write.shape, []).append(write.changes(now))
        if new:
            self.db.execute(insert(_TASKS), new)
        for shape, params in changed.items():
            self.db.execute(_update_statement(*shape), params)
        self.writes.clear()


# -- the store -----------------------------------------------------------------------------

class Jobs:
    """Job routes and the ``job-events`` consumer, on the tables of ``store``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._sessions = store.sessions

    # -- starting a job --------------------------------------------------------
    def run_action(self, ctx: Context, env_id: str, action: str,
                   parameters: Any, session_id: str | None = None) -> dict[str, Any]:
        """Start a job of ``action`` on an environment; its view (the task is queued).

        A ``plan`` with a configuration session plans the session's description:
        what deploying that session would run.
        """
        if action not in USER_ACTIONS:
            raise NotFound(f"unknown action {action[:80]!r}: the actions are "
                           f"{', '.join(USER_ACTIONS)}")
        if session_id and action != "plan":
            raise BadRequest(f"only plan takes a configuration session; {action} runs on "
                             f"the deployed environment")
        # a plan acts on no cloud: it needs no trust of its own
        with self.store.delegated(ctx, env_id, create=action != "plan") as delegation:
            body, view, previous = self._start(ctx, env_id, action, parameters, session_id,
                                               delegation)
            self.store.send_task(body, view["id"], env_id, previous)
            return view

    def _start(self, ctx: Context, env_id: str, action: str, parameters: Any,
               session_id: str | None,
               delegation: Delegation) -> tuple[dict, dict[str, Any], str]:
        """Check the job and claim the environment for it: the task's body, the
        job's view and the environment's state before."""
        with self._sessions.begin() as db:
            env = self.store.environment(db, ctx, env_id)
            description = env.description
            if session_id:
                description = self.store.config_session(db, ctx, env, session_id,
                                                        editable=False).description
            if env.state in BUSY:  # first: a first deployment running is no "never deployed"
                raise self.store.busy_error(db, env)
            parameters = self._checked(action, parameters, description,
                                       self.store.catalog_of(db, env.id))
            if env.version == 0 and action not in UNDEPLOYED_ACTIONS:
                raise Conflict(f"environment {env_id} has never been deployed: deploy it "
                               f"before running {action}")
            previous = env.state
            self._claim(db, env)
            job = Deployment(id=new_id(), environment_id=env.id, tenant_id=env.tenant_id,
                             kind=action, parameters=kept_parameters(parameters, description),
                             description=masked(description))
            db.add(job)
            keep_trust(env, delegation)
            body = contract.task_body(description, ctx.token, env.tenant_id,
                                      job=contract.job_section(job.id, action, parameters),
                                      trust_id=delegation.trust_id,
                                      packages=task_packages(db, env.id))
            db.flush()
            view = job_view(job)
        return body, view, previous

    def _checked(self, action: str, parameters: Any, model: dict[str, Any],
                 catalog: Catalog) -> dict[str, Any]:
        """The parameters with their defaults; a 400 naming the wrong one."""
        try:
            checked = check_parameters(action, parameters, model, catalog)
            if action == "execute_operation":
                select_units(checked, model, catalog)  # a unit without the operation: now
        except ActionError as exc:
            raise BadRequest(str(exc)) from None
        if action == "scale":
            self.store.limits.check_scale(model, checked["node_id"], checked["delta"])
        return checked

    def _claim(self, db: DbSession, env: Environment) -> None:
        """Mark the environment busy (uninstall too: it keeps the environment);
        a 409 naming the running job when another one has it."""
        claimed = db.execute(update(Environment).where(
            Environment.id == env.id, Environment.state.not_in(BUSY)).values(
            state="deploying", updated=utcnow())).rowcount
        if claimed != 1:    # a job started since the environment was read
            raise self.store.busy_error(db, env)

    # -- reading jobs -------------------------------------------------------------
    def list_jobs(self, ctx: Context, env_id: str) -> list[dict[str, Any]]:
        with self._sessions() as db:
            env = self.store.environment(db, ctx, env_id)
            counts = _task_counts(db, JobTask.environment_id == env.id)
            jobs = db.scalars(select(Deployment).where(
                Deployment.environment_id == env.id).order_by(
                Deployment.started.desc(), Deployment.created.desc()))
            return [job_view(job, counts.get(job.id)) for job in jobs]

    def get_job(self, ctx: Context, env_id: str, job_id: str) -> dict[str, Any]:
        with self._sessions() as db:
            job = self._job(db, ctx, env_id, job_id)
            tasks = list(db.scalars(select(JobTask).where(
                JobTask.deployment_id == job.id).order_by(JobTask.change_id)))
            counts = _task_counts(db, JobTask.deployment_id == job.id)
            return {**job_view(job, counts.get(job.id)), "tasks": [task_view(t) for t in tasks]}

    def trace(self, ctx: Context, env_id: str, job_id: str) -> dict[str, Any]:
        """The job's trace (404 for a job without one: older jobs, or a trace lost)."""
        with self._sessions() as db:
            job = self._job(db, ctx, env_id, job_id)
            row = db.get(JobTrace, job.id)
            if row is None:
                raise NotFound(f"job {job_id} has no trace (jobs before Fornace's contract "
                               f"1.7 have none)")
            try:
                found = trace_view(row, job_secrets(db, job))
            except BadTrace as exc:
                raise NotFound(f"job {job_id} has no readable trace: its data {exc}") from None
            found.update(job_id=job.id, environment_id=job.environment_id, action=job.kind,
                         state=job.state)
            return found

    def tasks_tsv(self, ctx: Context, env_id: str, job_id: str | None = None) -> str:
        """The tasks of one job (or of every job of the environment) as TSV."""
        with self._sessions() as db:
            if job_id is None:
                where = JobTask.environment_id == self.store.environment(db, ctx, env_id).id
            else:
                where = JobTask.deployment_id == self._job(db, ctx, env_id, job_id).id
            rows = db.execute(select(
                JobTask.change_id, JobTask.deployment_id, Deployment.kind, JobTask.status,
                JobTask.reason, JobTask.target, JobTask.target_name, JobTask.operation,
                JobTask.started, JobTask.finished, JobTask.summary).join(
                Deployment, Deployment.id == JobTask.deployment_id).where(where).order_by(
                JobTask.change_id))
            return tsv(rows)

    def _job(self, db: DbSession, ctx: Context, env_id: str, job_id: str) -> Deployment:
        env = self.store.environment(db, ctx, env_id)
        job = db.get(Deployment, lookup_id(job_id, "job"))
        if job is None or job.environment_id != env.id:
            raise NotFound(f"job {job_id} not found in environment {env_id}")
        return job

    # -- views of the environment ---------------------------------------------------
    def topology(self, ctx: Context, env_id: str,
                 session_id: str | None = None) -> dict[str, Any]:
        """The dependency graph of the deployed description (or of a session's)."""
        with self._sessions() as db:
            env = self.store.environment(db, ctx, env_id)
            description = env.description
            if session_id:
                description = self.store.config_session(db, ctx, env, session_id,
                                                         editable=False).description
            return topology.build(description, self.store.catalog_of(db, env.id)).view()

    def status(self, ctx: Context, env_id: str,
               session_id: str | None = None) -> dict[str, Any]:
        """Per service and unit the status the conductor keeps in the description.

        While a job runs, its model's services are shown (also those it
        adds), with the node states it has sent so far (contract 1.5); a
        unit it has not reached yet is pending.  A session's description
        (given) shows what that session would deploy.
        """
        with self._sessions() as db:
            env = self.store.environment(db, ctx, env_id)
            running = running_job(db, env.id)
            description, deployed, live = env.description, env.version > 0, None
            if session_id:
                description = self.store.config_session(db, ctx, env, session_id,
                                                        editable=False).description
            elif running is not None:   # what the job works on, as it moves
                description, deployed, live = running.description, False, running.nodes
            return {"environment_id": env.id, "version": env.version, "state": env.state,
                    "job": running.id if running is not None else None,
                    "services": status_view(description, deployed, live)}

    def outputs(self, ctx: Context, env_id: str) -> dict[str, Any]:
        """The endpoints of the deployed environment (:mod:`fornace.api.outputs`)."""
        with self._sessions() as db:
            env = self.store.environment(db, ctx, env_id)
            found = environment_outputs(env.description or {})
            found["environment"] = {"id": env.id, "name": env.name}
            return found

    # -- abandoning a job -------------------------------------------------------------
    def abandon(self, ctx: Context, env_id: str) -> dict[str, Any]:
        """Give up the running job: it ends as ``abandoned``, the environment is
        usable again and its job lock is cleared; what the job still sends is ignored."""
        with self._sessions.begin() as db:
            env = self.store.environment(db, ctx, env_id, lock=True)
            job = running_job(db, env.id)
            if job is None:
                raise Conflict(f"environment {env_id} runs no job: nothing to abandon")
            now = utcnow()
            job.state, job.finished, job.updated = "abandoned", now, now
            settle_tasks(db, job, now)
            env.state, env.updated = self._after_abandon(db, env, job), now
            _reopen_session(db, job, now)
            locks.revoke(db, env.id)   # its conductor finds the lock lost and stops
            db.add(Status(id=new_id(), deployment_id=job.id, entity="environment",
                          entity_id=env.id, level="warning",
                          text=f"job {job.id} ({job.kind}) abandoned by user {ctx.user_id}"))
            db.flush()
            return job_view(job)

    @staticmethod
    def _after_abandon(db: DbSession, env: Environment, job: Deployment) -> str:
        if job.kind in NOT_DEPLOYING:  # it deployed nothing
            return settled_state(db, env.id, job.id)
        return "delete failure" if job.kind == "delete" else "deploy failure"

    # -- from the conductor ------------------------------------------------------------
    def apply_job_event(self, body: Any, message_id: str | None) -> None:
        """Store a ``job-events`` message; a malformed one is logged and dropped."""
        outcome, = self.apply_job_events([(body, message_id)])
        if outcome is not None:
            raise outcome

    def apply_job_events(self, items: Sequence[tuple[Any, str | None]]) -> list[Outcome]:
        """Store ``job-events`` messages (``[(body, message id)]``, in arrival
        order) in one transaction (see :class:`_EventBatch`).

        A malformed event is logged and dropped alone.  If the transaction
        fails (a task row inserted concurrently, a value the database
        refuses), the events are stored one by one, so one bad event never
        loses the others.  One outcome per message: None, or the failure that
        stopped it and the events after it (see :func:`store_all`).
        """
        outcomes: list[Outcome] = [None] * len(items)
        events: list[Event] = []
        places: list[int] = []
        for index, (body, message_id) in enumerate(items):
            try:
                events.append((contract.parse_job_event(body), message_id))
            except contract.ContractError as exc:
                LOG.warning("job event %s dropped: %s", message_id, exc)
                continue
            places.append(index)
        stored = store_all(events, self._store_events, self._store_event, "job events")
        for index, outcome in zip(places, stored):
            outcomes[index] = outcome
        return outcomes

    def _store_events(self, events: Sequence[Event]) -> None:
        with self._sessions.begin() as db:
            _EventBatch(db, events).store()

    def _store_event(self, event: Event) -> None:
        for attempt in range(2):
            try:
                self._store_events([event])
                return
            except IntegrityError:  # another consumer inserted the same task first
                if attempt:
                    raise
                LOG.info("job event %s: task inserted concurrently, updating it", event[1])


def _refuse(db: DbSession, job: Deployment, summary: str) -> None:
    """The conductor would not run the job (the environment was locked): it
    ends as ``refused``, the environment as it was, the reason kept as a report."""
    now = utcnow()
    job.state, job.finished, job.updated = "refused", now, now
    settle_tasks(db, job, now)
    text = mask_text(summary, job_secrets(db, job)) or f"job {job.id} was refused"
    db.add(Status(id=new_id(), deployment_id=job.id, entity="environment",
                  entity_id=job.environment_id, level="error", text=text))
    env = db.get(Environment, job.environment_id)
    if env is not None and env.state in BUSY:
        env.state, env.updated = settled_state(db, env.id, job.id), now
    _reopen_session(db, job, now)


def _task_counts(db: DbSession, where: Any) -> dict[str, dict[str, int]]:
    """job id -> {status: number of tasks} (statuses without tasks left out)."""
    counts: dict[str, dict[str, int]] = {}
    for job_id, status, number in db.execute(select(
            JobTask.deployment_id, JobTask.status, func.count()).where(where).group_by(
            JobTask.deployment_id, JobTask.status)):
        counts.setdefault(job_id, {})[status] = number
    return counts


def _reopen_session(db: DbSession, job: Deployment, now: datetime.datetime) -> None:
    """The session of a job that did not run to its end can be deployed again
    (the environment's version did not change)."""
    if job.session_id:
        db.execute(update(ConfigSession).where(
            ConfigSession.id == job.session_id, ConfigSession.state == "deploying").values(
            state="open", updated=now))
