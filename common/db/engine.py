"""Database engine set-up and schema upgrades (Alembic, run in code)."""
from __future__ import annotations

import contextlib
import fcntl
import re
import sqlite3
import time
from typing import Any, Callable, Iterator

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, NullPool, create_engine, event, make_url, text
from sqlalchemy.orm import sessionmaker

from fornace.common.db import replay
from fornace.common.db.outages import READ_ONLY, retried, sqlstate
from fornace.common.db.pool import Pool, StartupRetries
from fornace.common.db.urls import checked, connect_args, shown
from fornace.common.resources import package_folder

MIGRATIONS = package_folder("fornace.common.db") / "migrations"


def make_engine(url: str, pre_ping: bool = True, pool: Pool | None = None) -> Engine:
    """An engine for ``url``; SQLite gets foreign keys and a busy timeout, a
    server database the pool ``pool`` describes (``[database]``'s; None:
    :class:`~fornace.common.db.pool.Pool`'s defaults).

    Its errors never quote a statement's values (``hide_parameters``): they
    are logged, and a description holds passwords and declared secrets.

    A PostgreSQL URL may name a primary and its standbys
    (:mod:`fornace.common.db.urls`; a URL that cannot work raises
    :class:`~fornace.common.db.urls.DatabaseUrlError`).  After a failover
    the pool connects again: a connection found dead is replaced when it is
    checked out (``pool_pre_ping``), and one whose server has become
    read-only is dropped with every other of the pool, so the next ones go
    through libpq's host list to the new primary.

    ``pre_ping=False`` (the API) saves that check, a round trip on every
    checkout: a dead connection is found by the first statement sent on it,
    and the pool's older ones are dropped with it; the failure is marked for
    :func:`fornace.common.db.replay.replayed`, which runs the work again when
    that cannot apply a write twice."""
    parsed = checked(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30},
                               hide_parameters=True)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(connection, _record) -> None:  # pragma: no cover - trivial
            cursor = connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            _wal(cursor)
            cursor.close()
        return engine
    # By default at most 30 connections, all of them kept once opened: an
    # overflow connection is closed when it is given back, so under load
    # every request past the pool's size pays for a new PostgreSQL connection
    # (a backend fork and authentication) -- the pool churns exactly when the
    # server is busiest.  Connections are still opened only when needed.
    pool = pool or Pool()
    timeout = {} if pool.timeout is None else {"pool_timeout": pool.timeout}
    engine = create_engine(parsed, pool_size=pool.size, max_overflow=pool.overflow,
                           pool_recycle=pool.recycle, pool_pre_ping=pre_ping,
                           hide_parameters=True, connect_args=connect_args(parsed), **timeout)
    event.listen(engine, "handle_error", _hide_failing_row)
    event.listen(engine, "handle_error", _drop_read_only)
    replay.watch(engine)   # after _drop_read_only: it decides what is a disconnect
    return engine


def wait_for_database(url: str, retries: StartupRetries,
                      sleep: Callable[[float], object] = time.sleep) -> None:
    """Return once the database server at ``url`` takes a connection, trying
    again as ``retries`` says while it is out of reach (each failure logged
    by :func:`~fornace.common.db.outages.retried`, the URL's password masked):
    a service started with its database (a reboot, a compose file) waits for
    it instead of dying, as oslo.db's services do.  The last failure, or one
    that would not pass by itself (a URL that cannot work), goes up.  An
    SQLite file needs no wait."""
    parsed = checked(url)
    if parsed.get_backend_name() == "sqlite":
        return

    def connect() -> None:
        engine = create_engine(parsed, poolclass=NullPool, connect_args=connect_args(parsed))
        try:
            with engine.connect():
                pass
        finally:
            engine.dispose()

    retried(connect, f"connecting to the database {shown(url)}", retries.delays(), sleep)


def _drop_read_only(context: Any) -> None:
    """A server that refuses writes ("cannot execute ... in a read-only
    transaction"): the standby a connection reached, or an old primary that an
    address now leads to a standby.  A ping does not see it (reads work), so
    the error counts as a disconnect: the connection and the pool's others are
    dropped, and the next ones look for the primary again."""
    if sqlstate(context.original_exception) == READ_ONLY:
        context.is_disconnect = True


_FAILING_ROW = re.compile(r"^DETAIL:\s+Failing row contains .*$", re.MULTILINE | re.DOTALL)


def _hide_failing_row(context: Any) -> None:
    """PostgreSQL's error of a constraint on a row quotes the whole row (``DETAIL:
    Failing row contains (...)``): a description with its secrets, in a log.  The
    row is cut from the driver's error and SQLAlchemy's, which are raised as they
    are otherwise (same classes, same SQLSTATE)."""
    for error in (context.original_exception, context.sqlalchemy_exception):
        if error is not None and error.args and isinstance(error.args[0], str) \
                and "Failing row contains" in error.args[0]:
            error.args = (_FAILING_ROW.sub("DETAIL:  Failing row contains (not shown)",
                                           error.args[0]), *error.args[1:])


def _wal(cursor: Any, attempts: int = 100) -> None:
    """Put the file in WAL mode (kept in the file: done once).

    Changing the journal mode needs a lock that SQLite's busy timeout does not
    wait for: connections opened at the same moment on a new file got
    "database is locked".  Such a failure is retried here for up to ~5 s.
    """
    for attempt in range(attempts):
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(0.05)


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


# PostgreSQL advisory lock key of schema upgrades ("fornace" in ASCII)
MIGRATION_LOCK = 0x666F726E616365


def upgrade(url: str, revision: str = "head") -> str | None:
    """Bring the schema of ``url`` to ``revision`` (creating it from empty);
    return the revision it had before (None: empty).

    Processes upgrading one database at once take turns (PostgreSQL: an
    advisory lock; an SQLite file: a lock on a file beside it), so the later
    ones find the schema done and change nothing.
    """
    checked(url)   # a URL that cannot work is said so before anything connects
    with _upgrade_lock(url):
        before = schema_revision(url)
        command.upgrade(alembic_config(url), revision)
    return before


def schema_revision(url: str) -> str | None:
    """The revision of the database at ``url`` (None: an empty schema)."""
    from alembic.runtime.migration import MigrationContext

    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str:
    """The newest revision of the migrations shipped with Fornace (no database)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def current(url: str) -> tuple[str | None, str]:
    """(the revision of the database at ``url`` or None when empty, the newest one)."""
    return schema_revision(url), head_revision()


@contextlib.contextmanager
def _upgrade_lock(url: str) -> Iterator[None]:
    if url.startswith("postgresql"):
        parsed = checked(url)
        engine = create_engine(parsed, poolclass=NullPool, connect_args=connect_args(parsed))
        try:
            with engine.connect() as connection:
                connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK})
                connection.commit()
                try:
                    yield
                finally:
                    connection.execute(text("SELECT pg_advisory_unlock(:key)"),
                                       {"key": MIGRATION_LOCK})
                    connection.commit()
        finally:
            engine.dispose()
        return
    database = make_url(url).database if url.startswith("sqlite") else None
    if not database or database == ":memory:":
        yield
        return
    with open(f"{database}.migrate-lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def session_factory(engine: Engine) -> sessionmaker:
    return sessionmaker(engine, expire_on_commit=False)
