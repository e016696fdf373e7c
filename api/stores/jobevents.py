"""Job events: what a conductor sends of a job as it runs (``job-events``,
and on the results queue), stored as the job's task rows, its node states,
its trace, its wait for the environment's lock (``queued``, then
``running``), or its refusal.

Events come in batches (:mod:`fornace.api.messagestore`, the loop reports
and results share): one transaction looks each job, lock token and task row
up once, merges the events of each task and writes the rows at the end
(:class:`_EventBatch`).  Within an event, what the table cannot hold (a task
field too long, a time that is not one: :class:`MalformedEvent`) or a trace
that is not one is dropped alone, and said why; events of an unknown job or
of a run that lost the environment's lock (:mod:`fornace.api.fencing`) are
dropped the same way.
"""
from __future__ import annotations

import datetime
import functools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from sqlalchemy import and_, bindparam, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session as DbSession

from fornace.api.fencing import fenced
from fornace.api.jobfacts import LIGHT_JOB, JobFacts, jobs_by_id
from fornace.api.jobnodes import Nodes, merge_nodes
from fornace.api.jobsecrets import SecretKeys, job_secrets
from fornace.api.jobstate import BUSY, reopen_session, settle_tasks, settled_state
from fornace.api.messagestore import Message, Outcome, store_message, store_messages
from fornace.api.notices import Notice, job_ended
from fornace.api.traces import store_trace
from fornace.common import contract
from fornace.common.db.inserts import insert_or_nothing
from fornace.common.db.models import (Job, Environment, JobEventId, JobTask, Status, new_id,
                                      utcnow)
from fornace.common.secrets import mask_text

if TYPE_CHECKING:
    from fornace.api.stores.store import Store

LOG = logging.getLogger(__name__)

# longest value of each text column of job_tasks (longer: the event is malformed)
_LIMITS = {"change_id": 64, "target": 255, "target_name": 255, "operation": 255,
           "reason": 64, "digest": 128}
_TEXT_FIELDS = ("target", "target_name", "operation", "reason", "status", "summary", "digest")


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


_TASKS = JobTask.__table__
# what a new row holds where no event of the batch set a value
_NEW_ROW = {"target": None, "target_name": None, "operation": None, "reason": None,
            "status": "pending", "started": None, "finished": None, "summary": None,
            "digest": None}
Event = tuple[contract.JobEvent, str | None]   # (event, message id)
# the job states a conductor sends that change the job: waiting for the
# environment's lock, holding it after a wait, refused
_STATES = ("queued", "running", "refused")
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


@functools.cache
def _rows_of_one_environment() -> Any:
    """``_EventBatch._rows``' read when its events are of one environment, built
    once (:mod:`fornace.common.db.prepared`)."""
    return (select(JobTask.environment_id, JobTask.change_id, JobTask.id)
            .where(JobTask.environment_id == bindparam("env_id"),
                   JobTask.change_id.in_(bindparam("change_ids", expanding=True))))


@functools.lru_cache(maxsize=4)
def _claim_keys_statement(dialect_name: str) -> Any:
    """``_EventBatch._claim_keys``'s insert, built once (None: the database has
    no ON CONFLICT)."""
    table = JobEventId.__table__
    statement = insert_or_nothing(dialect_name, table)
    return None if statement is None else statement.returning(table.c.key)


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

    def __init__(self, db: DbSession, events: Sequence[Event],
                 secret_keys: SecretKeys, ended: list[Notice] | None = None) -> None:
        self.db = db
        self.ended = ended   # the notices of the jobs refused (None: not wanted)
        self.secret_keys = secret_keys
        self.events = events
        # the batch's jobs, without their JSON, and their environments' lock tokens
        self.jobs = jobs_by_id(db, [e.job_id for e, _ in events if self._needs_job(e)])
        self.loaded: dict[str, Job] = {}    # rows of the jobs whose state events change
        self.rows = self._rows()
        self.fresh_keys = self._claim_keys()   # task events not stored before
        self.secrets: dict[str, set[str]] = {}
        self.writes: dict[tuple[str, str], _TaskWrite] = {}
        self.nodes: dict[str, Nodes] = {}   # job id -> the node states that moved

    @staticmethod
    def _needs_job(event: contract.JobEvent) -> bool:
        """Task events, traces and job states (queued, running, refused) change
        rows of their job; the rest is logged."""
        return event.kind in TASK_KINDS or event.kind == "trace" or event.state in _STATES

    def _loaded(self, job: JobFacts) -> Job:
        """The ORM row of a job whose state an event changes (queued, running,
        refused: rare), without its JSON columns."""
        if job.id not in self.loaded:
            self.loaded[job.id] = self.db.get(Job, job.id, options=LIGHT_JOB)
        return self.loaded[job.id]

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
        by_env: dict[str, list[str]] = {}
        for env_id, change_id in sorted(keys):
            by_env.setdefault(env_id, []).append(change_id)
        # per environment (a batch's events are mostly one job's): an IN of plain
        # values, cheaper to build than one of (environment, change id) pairs
        if len(by_env) == 1:
            [(env_id, change_ids)] = by_env.items()
            found = self.db.execute(_rows_of_one_environment(),
                                    {"env_id": env_id, "change_ids": change_ids})
        else:
            found = self.db.execute(
                select(JobTask.environment_id, JobTask.change_id, JobTask.id)
                .where(or_(*(and_(JobTask.environment_id == env_id,
                                  JobTask.change_id.in_(change_ids))
                             for env_id, change_ids in by_env.items()))))
        return {(env_id, change_id): row_id for env_id, change_id, row_id in found}

    def _claim_keys(self) -> set[str]:
        """Record the batch's task events of known jobs in ``job_event_ids`` at
        once; the keys of those not stored before (a batch sent again, or
        delivered again, finds its own there).  One ``INSERT ... ON CONFLICT DO
        NOTHING RETURNING``: a key another consumer is storing meanwhile waits
        for its transaction, and counts as stored when that commits."""
        jobs: dict[str, str] = {}    # key -> job id
        for event, message_id in self.events:
            key = _event_key(event, message_id)
            job = self.jobs.get(event.job_id)
            if key is not None and job is not None \
                    and job.environment_id == event.environment_id:
                jobs.setdefault(key, job.id)
        if not jobs:
            return set()
        now = utcnow()
        rows = [{"key": key, "deployment_id": job_id, "created": now}
                for key, job_id in jobs.items()]
        statement = _claim_keys_statement(self.db.get_bind().dialect.name)
        if statement is None:   # no ON CONFLICT: ask, then insert the others
            stored = set(self.db.scalars(select(JobEventId.key).where(
                JobEventId.key.in_(jobs))))
            rows = [row for row in rows if row["key"] not in stored]
            if rows:
                self.db.execute(insert(JobEventId.__table__), rows)
            return {row["key"] for row in rows}
        return set(self.db.scalars(statement, rows))

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

    def _job(self, event: contract.JobEvent, message_id: str | None) -> JobFacts | None:
        """The event's job; None (and said why) for an unknown one or a stale sender."""
        job = self.jobs.get(event.job_id)
        if job is None or job.environment_id != event.environment_id:
            LOG.info("job event %s for unknown job %.80r of environment %.80r dropped",
                     message_id, event.job_id, event.environment_id)
            return None
        if fenced(job.token, job.environment_id, event.fence, f"job event {message_id}"):
            return None
        return job

    def _tasks(self, event: contract.JobEvent, message_id: str | None) -> None:
        job = self._job(event, message_id)
        if job is None:
            return
        key = _event_key(event, message_id)
        if key is not None:
            if key not in self.fresh_keys:   # its log lines are in
                LOG.info("job event %s of job %s: stored before, not again", message_id,
                         job.id)
                return
            self.fresh_keys.discard(key)     # once in the batch too
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
            self.nodes.setdefault(job.id, {}).update(event.nodes)

    def _merge(self, job: JobFacts, change_id: str, fields: TaskFields) -> None:
        key = (job.environment_id, change_id)
        write = self.writes.get(key)
        if write is None:
            write = self.writes[key] = _TaskWrite(job.id, self.rows.get(key))
        write.add(fields)

    def _secrets(self, job: JobFacts) -> set[str]:
        if job.id not in self.secrets:
            self.secrets[job.id] = job_secrets(self.db, job, self.secret_keys)
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
        LOG.info("job %s: trace stored (%d bytes, %d compressed)", job.id, stored["size"],
                 stored["stored"])

    def _job_state(self, event: contract.JobEvent, message_id: str | None) -> None:
        if event.state not in _STATES:  # results end jobs; the rest is informative
            LOG.debug("job event %s: job %s is %s", message_id, event.job_id, event.state)
            return
        facts = self._job(event, message_id)
        if facts is None:
            return
        job = self._loaded(facts)
        if job.finished is not None:
            LOG.info("job event %s: job %s already ended (%s); %s ignored",
                     message_id, job.id, job.state, event.state)
            return
        if event.state == "refused":
            self._write()       # the tasks it settles include those of the events before
            env = _refuse(self.db, job, event.summary, self._secrets(facts))
            if self.ended is not None and env is not None:
                self.ended.append(job_ended(self.db, env, job, job.state, job.finished))
        elif event.state == "queued":
            _queue(self.db, job, event.summary, self._secrets(facts))
        elif job.state == "queued":     # running: it holds the lock now
            _resume(self.db, job)

    # -- writing ------------------------------------------------------------------
    def _write(self) -> None:
        """Insert the new task rows (one executemany), update the others (one
        executemany per shape of change) and merge the node states that moved
        (:mod:`fornace.api.jobnodes`)."""
        merge_nodes(self.db, self.nodes)
        self.nodes = {}
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


class JobEvents:
    """The ``job-events`` consumer's store, on the tables of ``store``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._sessions = store.sessions
        self._secret_keys = store.secret_keys

    def apply(self, body: Any, message_id: str | None) -> None:
        """Store one ``job-events`` message (what stopped it is raised)."""
        store_message(self.apply_all, body, message_id)

    def apply_all(self, messages: Sequence[Message]) -> list[Outcome]:
        """Store ``job-events`` messages (``[(body, message id)]``, in arrival
        order) in one transaction (see :class:`_EventBatch`); one outcome per
        message (:func:`fornace.api.messagestore.store_messages`)."""
        return store_messages(messages, _parse, self._store_events, self._store_event,
                              "job events")

    def _store_events(self, events: Sequence[Event]) -> None:
        ended: list[Notice] | None = [] if self.store.notifications.enabled else None
        with self._sessions.begin() as db:
            _EventBatch(db, events, self._secret_keys, ended).store()
        for notice in ended or ():   # committed: the jobs were refused
            self.store.notify(None, notice.event_type, notice.payload, notice.error)

    def _store_event(self, event: Event) -> None:
        for attempt in range(2):
            try:
                self._store_events([event])
                return
            except IntegrityError:  # another consumer inserted the same task first
                if attempt:
                    raise
                LOG.info("job event %s: task inserted concurrently, updating it", event[1])


def _event_key(event: contract.JobEvent, message_id: str | None) -> str | None:
    """What tells a task event stored before (``job_event_ids``): its message id
    and the fence token it carried -- a takeover numbers its events from 1
    again, under a new token.  None: not a task event, or no id to tell."""
    if event.kind not in TASK_KINDS or not message_id:
        return None
    return f"{message_id[:255]}@{event.fence if event.fence is not None else ''}"


def _parse(body: Any, message_id: str | None) -> Event:
    return contract.parse_job_event(body), message_id


def _queue(db: DbSession, job: Job, summary: str, secrets: set[str]) -> None:
    """The job waits for its environment's lock, held by another job: shown
    ``queued``, why kept as a report (once: a copy that waits again says
    nothing new)."""
    if job.state == "queued":
        return
    now = utcnow()
    job.state, job.updated = "queued", now
    text = mask_text(summary, secrets) or f"job {job.id} waits for the environment's lock"
    db.add(Status(id=new_id(), deployment_id=job.id, entity="environment",
                  entity_id=job.environment_id, level="info", text=text))


def _resume(db: DbSession, job: Job) -> None:
    """A queued job holds the environment's lock now: running again."""
    now = utcnow()
    job.state, job.updated = "running", now
    db.add(Status(id=new_id(), deployment_id=job.id, entity="environment",
                  entity_id=job.environment_id, level="info",
                  text=f"job {job.id} holds the environment's lock: it runs"))


def _refuse(db: DbSession, job: Job, summary: str,
            secrets: set[str]) -> Environment | None:
    """The conductor would not run the job (the environment stayed locked past
    its ``lock_wait``): it ends as ``refused``, the environment as it was, the
    reason kept as a report.  Its environment (None: gone)."""
    now = utcnow()
    job.state, job.finished, job.updated = "refused", now, now
    settle_tasks(db, job.id, job.state, now)
    text = mask_text(summary, secrets) or f"job {job.id} was refused"
    db.add(Status(id=new_id(), deployment_id=job.id, entity="environment",
                  entity_id=job.environment_id, level="error", text=text))
    env = db.get(Environment, job.environment_id)
    if env is not None and env.state in BUSY:
        env.state, env.updated = settled_state(db, env.id, job.id), now
    reopen_session(db, job, now)
    return env

