"""One job at a time per environment, across conductors: a lock row per environment.

Two conductors may get tasks of the same environment (two API workers, a
redelivered task, an operator's retry); running both would have them fight
over the same stacks and agents.  Before it runs a job the conductor takes
the environment's row of ``job_locks``, refreshes its heartbeat while the job
runs and frees it at the end.  A job that finds the lock taken by another
job waits for it a bounded time, then is refused (the daemon's loop over
:meth:`JobLock.acquire`, :mod:`fornace.conductor.jobs.lockwait`).

Each grant is identified by its holder (conductor and job) and a fencing
token, a number that grows with every grant and every revocation (a user's
abandon) and never goes back: rows are freed, not deleted.  Heartbeat and
release only touch the lock when holder, job and token all still match, so a
conductor that lost its lock (revoked, or taken over after a pause) can
neither refresh nor free its successor's.  A lock is taken over only when
its heartbeat is older than ``stale_after`` -- also by a copy of the same job
(a redelivered task): while the first copy's conductor still beats, the
second waits (:meth:`JobLock.acquire` says so with :class:`LockHeld`).

A grant keeps the task it runs in its row (:class:`HeldTask`): a holder that
falls silent -- a frozen process, whose task message the broker still holds
unacknowledged -- is found by another conductor (:meth:`JobLock.silent`),
which claims the takeover (:meth:`JobLock.claim`, at most once per stale
period whoever asks) and runs the task itself
(:mod:`fornace.conductor.jobs.takeover`).

Times: on PostgreSQL the database's clock (conductors on several machines
compare one clock); on SQLite, a file on one machine, the machine's.
Every step is a single conditional statement, so two conductors racing for
the same environment cannot both win, on PostgreSQL as on SQLite.
"""
from __future__ import annotations

import datetime
import functools
from dataclasses import dataclass
from typing import Any, Callable

from sqlalchemy import Connection, Engine, and_, bindparam, or_, select, update

from fornace.common.db import locks
from fornace.common.db.inserts import insert_or_nothing
from fornace.common.db.engine import make_engine
from fornace.common.db.pool import Pool
from fornace.common.db.models import Job as JobRow, JobLock as LockRow

Clock = Callable[[], datetime.datetime]


@dataclass(frozen=True)
class LockHeld:
    """Who holds an environment's lock (why a job was refused, or waits)."""

    job_id: str
    holder: str
    acquired: datetime.datetime

    def describe(self, environment_id: str) -> str:
        when = self.acquired.isoformat(timespec="seconds")
        return (f"environment {environment_id} is locked by job {self.job_id} "
                f"(conductor {self.holder}) since {when}")


@dataclass(frozen=True)
class Grant:
    """The lock of ``environment_id`` held by ``job_id`` at ``holder``, with its token."""

    environment_id: str
    job_id: str
    holder: str
    token: int


@dataclass(frozen=True)
class HeldTask:
    """The task a grant runs, kept in its lock row for a takeover: the broker's
    message id and the body as JSON text (the model's secrets and the user's
    token inside: never logged)."""

    message_id: str
    body: str

    def __repr__(self) -> str:   # never the body, whatever prints it
        return f"HeldTask({self.message_id!r})"


@dataclass(frozen=True)
class Silent:
    """A held lock whose heartbeat stopped while its job has not ended."""

    environment_id: str
    job_id: str
    holder: str
    token: int
    task_id: str


@dataclass(frozen=True)
class Revoked:
    """The lock was just revoked: its job may still be stopping; wait a moment."""


@dataclass(frozen=True)
class AlreadyDone:
    """The job ended earlier holding this lock (its task came again)."""

    job_id: str


class JobLock:
    """The ``job_locks`` table of the database at ``url_or_engine``.

    ``clock`` replaces the lock's time source (tests); by default it is the
    database's on PostgreSQL and this machine's on SQLite.
    """

    _ATTEMPTS = 5  # a lock freed between our insert and update: try again

    def __init__(self, url_or_engine: str | Engine, clock: Clock | None = None,
                 revoke_grace: float = 5.0, pool: Pool | None = None) -> None:
        self.engine = (make_engine(url_or_engine, pool=pool) if isinstance(url_or_engine, str)
                       else url_or_engine)
        self._owns_engine = isinstance(url_or_engine, str)
        self.clock = clock
        self.revoke_grace = revoke_grace   # seconds a revoked job has to notice and stop

    def close(self) -> None:
        """Dispose of the engine if this lock made it (from a URL)."""
        if self._owns_engine:
            self.engine.dispose()

    def __enter__(self) -> "JobLock":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- time ------------------------------------------------------------------
    def _now(self) -> Any:
        return self.clock() if self.clock else locks.lock_now(self.engine.dialect.name)

    def _ago(self, seconds: float) -> Any:
        return locks.before(self._now(), seconds)

    def _sql_clock(self, dialect_name: str) -> bool:
        """Whether the lock's time is the database's, written in the statements."""
        return self.clock is None and dialect_name == "postgresql"   # as locks.lock_now

    def _sql(self, conn: Connection) -> "_Statements":
        """The hot statements for this connection's database and clock."""
        return _statements(conn.dialect.name, self._sql_clock(conn.dialect.name))

    def _now_value(self) -> dict[str, Any]:
        """The bound ``now`` of the statements of :meth:`_sql` (none: the database's)."""
        if self._sql_clock(self.engine.dialect.name):
            return {}
        return {"b_now": self._now()}

    # -- the lock ----------------------------------------------------------------
    def acquire(self, environment_id: str, job_id: str, holder: str,
                stale_after: float = 60.0, task: HeldTask | None = None,
                ) -> Grant | LockHeld | AlreadyDone | Revoked:
        """Take the environment's lock for ``job_id``: a :class:`Grant`; else who
        holds it (:class:`LockHeld`, maybe this same job elsewhere), or
        :class:`AlreadyDone` when this job already ended: its row of the jobs
        table says so (whoever ended it, however late this copy comes), or it
        was the last job to hold the lock.  ``task`` is kept with the grant,
        for another conductor to take over should this holder fall silent: stored
        once, with the grant (:meth:`_keep`), never with the tries of a job that
        waits for the lock -- a waiting 1000-unit task would ship its body to the
        database every second.

        One transaction when the lock is free: take it (insert the row, or one
        conditional update), check the job has not ended (else roll back),
        keep the task."""
        for _ in range(self._ATTEMPTS):
            with self.engine.connect() as conn, conn.begin() as transaction:
                # the writes first: on SQLite a transaction that read first could not
                # take the write lock when another took it meanwhile
                token = self._insert(conn, environment_id, job_id, holder)
                if token is None:
                    token = self._take(conn, environment_id, job_id, holder, stale_after)
                if token is not None:
                    if self._ended(conn, job_id):
                        transaction.rollback()
                        return AlreadyDone(job_id)
                    grant = Grant(environment_id, job_id, holder, token)
                    if task is not None:
                        self._keep(conn, grant, task)
                    return grant
            with self.engine.connect() as conn:
                row = conn.execute(select(LockRow.job_id, LockRow.holder, LockRow.acquired,
                                          LockRow.done_job).where(
                    LockRow.environment_id == environment_id)).first()
                if self._ended(conn, job_id):
                    return AlreadyDone(job_id)
            if row is not None and row.job_id is not None:
                return LockHeld(row.job_id, row.holder or "?", row.acquired)
            if row is not None and row.holder == locks.REVOKED:
                return Revoked()
            if row is not None and row.done_job == job_id:
                return AlreadyDone(job_id)
        raise RuntimeError(f"environment {environment_id}: the job lock kept changing hands "
                           f"while job {job_id} tried to take it")

    @staticmethod
    def _ended(conn: Connection, job_id: str) -> bool:
        """Whether the job's own record (the API's jobs table) says it ended; a
        job with no record (a conductor without the API's tables) has not."""
        return conn.execute(_statements(conn.dialect.name, False).ended,
                            {"b_job_id": job_id}).scalar() is not None

    def holder(self, environment_id: str) -> LockHeld | None:
        """Who holds the environment's lock now (None: nobody)."""
        with self.engine.connect() as conn:
            row = conn.execute(select(LockRow.job_id, LockRow.holder, LockRow.acquired).where(
                LockRow.environment_id == environment_id, LockRow.job_id.is_not(None))).first()
        return LockHeld(row.job_id, row.holder, row.acquired) if row is not None else None

    def token(self, environment_id: str) -> int:
        """The environment's current fencing token (0: never locked)."""
        with self.engine.connect() as conn:
            value = conn.execute(select(LockRow.token).where(
                LockRow.environment_id == environment_id)).scalar()
        return int(value or 0)

    def heartbeat(self, grant: Grant) -> bool:
        """Say the job still runs; False when the grant is no longer the lock's
        (revoked by an abandon, or taken over after a long pause)."""
        with self.engine.begin() as conn:
            return conn.execute(self._sql(conn).heartbeat,
                                {**_held(grant), **self._now_value()}).rowcount == 1

    def release(self, grant: Grant, done: bool = True) -> bool:
        """Free the lock at the end of the job if the grant still holds it
        (``done``: remember the job as ended, so a copy of it is not run again)."""
        with self.engine.begin() as conn:
            statement = self._sql(conn).release_done if done else self._sql(conn).release
            return conn.execute(statement, _held(grant)).rowcount == 1

    def clear(self, environment_id: str) -> int:
        """Revoke the lock whoever holds it (the job was abandoned); the new token."""
        with self.engine.begin() as conn:
            return locks.revoke(conn, environment_id, self._now())

    # -- the two race-free steps --------------------------------------------------
    def _insert(self, conn: Connection, environment_id: str, job_id: str,
                holder: str) -> int | None:
        """The environment's first grant: its row inserted (token 1); None when
        the row exists (no error: the transaction goes on)."""
        statement = self._sql(conn).insert
        if statement is None:
            raise RuntimeError(f"job locks need PostgreSQL or SQLite, not {conn.dialect.name}")
        row = conn.execute(statement, {
            "b_environment_id": environment_id, "b_job_id": job_id, "b_holder": holder,
            **self._now_value()}).first()
        return 1 if row is not None else None

    def _take(self, conn: Connection, environment_id: str, job_id: str, holder: str,
              stale_after: float) -> int | None:
        """Take a free row or a stale one, in one conditional UPDATE: of two racers
        the second sees the first's fresh heartbeat and matches nothing.  A row
        revoked less than ``revoke_grace`` ago is not free yet."""
        now = self._now()
        free = LockRow.job_id.is_(None) & or_(LockRow.done_job.is_(None),
                                              LockRow.done_job != job_id)
        settled = or_(LockRow.holder.is_(None), LockRow.holder != locks.REVOKED,
                      LockRow.heartbeat < self._ago(self.revoke_grace))
        # a silent holder is taken over; a freed row is only free (it says which
        # job ended last, whose copies must not run)
        silent = LockRow.job_id.is_not(None) & (LockRow.heartbeat < self._ago(stale_after))
        row = conn.execute(update(LockRow).where(
            LockRow.environment_id == environment_id,
            or_(free & settled, silent)).values(
            job_id=job_id, holder=holder, acquired=now, heartbeat=now,
            token=LockRow.token + 1, **locks.NO_TASK).returning(LockRow.token)).first()
        return int(row.token) if row is not None else None

    def _keep(self, conn: Connection, grant: Grant, task: HeldTask) -> bool:
        """Store the task a grant runs in its row, for a takeover: one UPDATE keyed
        on the grant (holder, job, token), so it never lands in a successor's row;
        False when the grant was lost meanwhile."""
        return conn.execute(self._sql(conn).keep, {
            **_held(grant), "b_task_id": task.message_id, "b_task_body": task.body}
            ).rowcount == 1

    # -- taking over a silent holder's job ---------------------------------------------
    def silent(self, stale_after: float, other_than: str = "") -> list[Silent]:
        """The held locks whose heartbeat is older than ``stale_after``, that keep
        their task, whose job has not ended (no record of it ending in the jobs
        table) and whose takeover was not claimed within ``stale_after``;
        those of holder ``other_than`` (this conductor's own) left out."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(LockRow.environment_id, LockRow.job_id, LockRow.holder, LockRow.token,
                       LockRow.task_id)
                .outerjoin(JobRow, JobRow.id == LockRow.job_id)
                .where(LockRow.job_id.is_not(None), LockRow.task_body.is_not(None),
                       LockRow.holder != other_than, JobRow.finished.is_(None),
                       *self._takeover_due(stale_after))
                .order_by(LockRow.heartbeat)).all()
        return [Silent(r.environment_id, r.job_id, r.holder or "?", int(r.token), r.task_id)
                for r in rows]

    def claim(self, found: Silent, stale_after: float) -> HeldTask | None:
        """Claim the takeover of ``found``'s job: its task, or None when the lock
        changed meanwhile (its holder beat again, it was freed or taken, or
        another conductor claimed it less than ``stale_after`` ago).  One
        conditional UPDATE: of several conductors asking at once one gets it."""
        with self.engine.begin() as conn:
            row = conn.execute(update(LockRow).where(
                LockRow.environment_id == found.environment_id,
                LockRow.token == found.token, LockRow.job_id == found.job_id,
                LockRow.task_body.is_not(None), *self._takeover_due(stale_after))
                .values(takeover_at=self._now())
                .returning(LockRow.task_id, LockRow.task_body)).first()
        if row is None or row.task_id is None:
            return None
        return HeldTask(row.task_id, row.task_body)

    def _takeover_due(self, stale_after: float) -> tuple:
        """A silent holder (no heartbeat for ``stale_after``) whose takeover no
        conductor claimed within ``stale_after``."""
        ago = self._ago(stale_after)
        return (LockRow.heartbeat < ago,
                or_(LockRow.takeover_at.is_(None), LockRow.takeover_at < ago))


def _held(grant: Grant) -> dict[str, Any]:
    """The bound values of a grant, for the statements keyed on it."""
    return {"b_environment_id": grant.environment_id, "b_job_id": grant.job_id,
            "b_holder": grant.holder, "b_token": grant.token}


@dataclass(frozen=True)
class _Statements:
    """The lock's statements of every job, built once per database and clock
    (:mod:`fornace.common.db.prepared`); values bound as ``b_<name>``."""

    insert: Any          # None: the database has no ON CONFLICT (no lock there)
    ended: Any
    keep: Any
    heartbeat: Any
    release: Any
    release_done: Any


@functools.lru_cache(maxsize=8)
def _statements(dialect_name: str, sql_clock: bool) -> _Statements:
    table = LockRow.__table__
    now = (locks.lock_now(dialect_name) if sql_clock
           else bindparam("b_now", type_=table.c.heartbeat.type))
    held = and_(table.c.environment_id == bindparam("b_environment_id"),
                table.c.job_id == bindparam("b_job_id"),
                table.c.holder == bindparam("b_holder"),
                table.c.token == bindparam("b_token"))
    insert = insert_or_nothing(dialect_name, table)
    if insert is not None:
        insert = insert.values(
            environment_id=bindparam("b_environment_id"), job_id=bindparam("b_job_id"),
            holder=bindparam("b_holder"), acquired=now, heartbeat=now, token=1,
            **locks.NO_TASK).returning(table.c.token)
    freed = {"job_id": None, "holder": None, **locks.NO_TASK}
    return _Statements(
        insert=insert,
        ended=select(JobRow.__table__.c.finished).where(
            JobRow.__table__.c.id == bindparam("b_job_id")),
        keep=update(table).where(held).values(
            task_id=bindparam("b_task_id"),
            task_body=bindparam("b_task_body", type_=table.c.task_body.type),
            takeover_at=None),
        heartbeat=update(table).where(held).values(heartbeat=now),
        release=update(table).where(held).values(**freed),
        release_done=update(table).where(held).values(**freed,
                                                      done_job=bindparam("b_job_id")))

