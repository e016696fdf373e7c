"""Database engine set-up and schema upgrades (Alembic, run in code)."""
from __future__ import annotations

import sqlite3
import time
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import sessionmaker

from fornace.common.resources import package_folder

MIGRATIONS = package_folder("fornace.common.db") / "migrations"


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets foreign keys and a busy timeout."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(connection, _record) -> None:  # pragma: no cover - trivial
            cursor = connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            _wal(cursor)
            cursor.close()
        return engine
    # At most 30 connections, as before (10 + 20 overflow), but all of them kept
    # once opened: an overflow connection is closed when it is given back, so
    # under load every request past the tenth concurrent one paid for a new
    # PostgreSQL connection (a backend fork and authentication) -- the pool
    # churned exactly when the server was busiest.  Connections are still
    # opened only when needed.
    return create_engine(url, pool_size=30, max_overflow=0, pool_pre_ping=True)


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


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the schema of ``url`` to ``revision`` (creating it from empty)."""
    command.upgrade(alembic_config(url), revision)


def session_factory(engine: Engine) -> sessionmaker:
    return sessionmaker(engine, expire_on_commit=False)
