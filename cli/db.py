"""``fornace db upgrade|current|purge``: the schema of Fornace's database
(Alembic), and its history.

``fornace api`` and ``fornace up`` upgrade the schema themselves when they
start (processes starting together take turns); these commands let an
operator do it before, or see where a database stands.  ``purge
--older-than DAYS`` removes the history of jobs that ended more than DAYS
days ago (:mod:`fornace.common.db.history`: what is kept), ``--dry-run``
only counts it.  Exit status of ``current``: 0 at the newest revision, 1
behind it (or empty); of all, as ``fornace --help`` says: 2 for a URL that
names no database Fornace can use (unparseable, an unknown dialect or
driver, several PostgreSQL hosts named in a way that cannot work) or a
number of days that is none, 3 for a database that is unreachable or
refuses (one line naming the URL: every host, its passwords masked).
"""
from __future__ import annotations

import argparse
import sys

from oslo_config import cfg

from fornace.cli.argtypes import days
from fornace.cli.client.common import FAILED, OK, UNAVAILABLE, USAGE
from fornace.cli.suggest import add_actions
from fornace.common.options import database_url
from fornace.common.secrets import mask_text


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "db", help="upgrade the database schema, show its revision, or purge old history",
        description="The database schema (Alembic migrations shipped with Fornace), and "
                    "the history of ended jobs.")
    actions = add_actions(parser, dest="action", metavar="ACTION", required=True)
    for name, text in (("upgrade", "bring the schema to the newest revision (creating it "
                                   "in an empty database)"),
                       ("current", "print the schema's revision and the newest one"),
                       ("purge", "remove the jobs that ended more than DAYS days ago, with "
                                 "their reports, task records and traces (each environment's "
                                 "latest jobs are kept)")):
        action = actions.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        if name == "purge":
            action.add_argument("--older-than", metavar="DAYS", type=days, required=True,
                                help="remove the history of jobs that ended more than DAYS "
                                     "days ago (a whole number, 0 or more)")
            action.add_argument("--dry-run", action="store_true",
                                help="only count the rows that would be removed, per table")
        action.add_argument("--db", metavar="URL",
                            help="database URL (default [database] connection, else SQLite "
                                 "in [api] state_dir)")


def run(conf: cfg.ConfigOpts) -> int:
    from alembic.util import CommandError
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

    from fornace.common.db.urls import DatabaseUrlError, checked, passwords, shown

    command = conf.command
    try:
        url = command.db or database_url(conf)
    except OSError as exc:   # the default SQLite file's folder cannot be made
        return _fail(f"in [api] state_dir {conf.api.state_dir}", "cannot be made",
                     _reason(exc, []), UNAVAILABLE)
    try:
        checked(url)
    except DatabaseUrlError as exc:   # its text never quotes SQLAlchemy's reason (a password)
        print(f"fornace db: {exc}", file=sys.stderr)
        return USAGE
    seen, secrets = shown(url), passwords(url)
    try:
        if command.action == "purge":
            return _purge(url, seen, command.older_than, command.dry_run)
        return _run(command.action, url, seen)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:   # ImportError: no driver
        return _fail(seen, "is no database Fornace can use", _reason(exc, secrets), USAGE)
    except (SQLAlchemyError, CommandError, OSError) as exc:   # OSError: SQLite's folder
        return _fail(seen, "cannot be used", _reason(exc, secrets), UNAVAILABLE)


def _run(action: str, url: str, shown: str) -> int:
    from fornace.common.db.engine import current, head_revision, upgrade

    if action == "upgrade":
        before = upgrade(url)
        head = head_revision()
        if before == head:
            print(f"{shown}: already at revision {head}")
        else:
            print(f"{shown}: upgraded from {before or 'an empty schema'} to revision {head}")
        return OK
    revision, head = current(url)
    state = "the newest" if revision == head else f"behind the newest, {head}"
    print(f"{shown}: revision {revision or 'none (empty schema)'} ({state})")
    return OK if revision == head else FAILED


def _purge(url: str, shown: str, older_than: int, dry_run: bool) -> int:
    """``fornace db purge``: the rows of each table removed (or, ``dry_run``,
    that would be), one line each."""
    from fornace.common.db.engine import current, make_engine
    from fornace.common.db.history import MEANING, TABLES, Cutoff, count, purge

    revision, head = current(url)
    if revision != head:
        return _fail(shown, f"has the schema {revision or 'none (empty)'}, not the newest, "
                            f"{head}", "run fornace db upgrade first", UNAVAILABLE)
    cutoff = Cutoff(older_than)
    engine = make_engine(url)
    try:
        if dry_run:
            with engine.connect() as connection:
                counts = count(connection, cutoff)
        else:
            counts = purge(engine, cutoff)
    finally:
        engine.dispose()
    what = "would remove" if dry_run else "removed"
    print(f"{what} the history of jobs that ended before "
          f"{cutoff.before.isoformat(' ', 'seconds')} UTC ({older_than} day(s) ago):")
    width = max(len(name) for name in TABLES)
    for name in TABLES:
        print(f"  {name:<{width}}  {counts[name]:>8}  {MEANING[name]}")
    return OK


def _reason(exc: BaseException, secrets: list[str]) -> str:
    """The first line of the reason the driver or SQLAlchemy gave, ``secrets``
    masked."""
    from sqlalchemy.exc import DBAPIError

    reason = str(exc.orig if isinstance(exc, DBAPIError) else exc).strip()
    return mask_text(reason.splitlines()[0], secrets) if reason else type(exc).__name__


def startup_errors() -> tuple[type[BaseException], ...]:
    """What a daemon's start on a database it cannot use raises (for
    :func:`failed_start`): SQLAlchemy's and Alembic's errors, a driver not
    installed, a URL Fornace refuses."""
    from alembic.util import CommandError
    from sqlalchemy.exc import SQLAlchemyError

    from fornace.common.db.urls import DatabaseUrlError

    return (SQLAlchemyError, CommandError, ImportError, DatabaseUrlError)


def failed_start(command: str, url: str, exc: BaseException) -> int:
    """For a daemon (``fornace api``, ``fornace up``) whose database failed
    at start: one line naming it, no traceback; the exit status as
    ``fornace db`` gives it (2: no database Fornace can use, 3: unreachable,
    refusing or without the schema)."""
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    from fornace.common.db.urls import DatabaseUrlError, passwords, shown

    if isinstance(exc, DatabaseUrlError):
        print(f"fornace {command}: {exc}", file=sys.stderr)
        return USAGE
    if isinstance(exc, (ArgumentError, NoSuchModuleError, ImportError)):
        print(f"fornace {command}: the database {shown(url)} is no database Fornace can "
              f"use: {_reason(exc, passwords(url))}", file=sys.stderr)
        return USAGE
    return unusable(command, url, exc)


def unusable(command: str, url: str, exc: BaseException) -> int:
    """For a command the database failed (unreachable, refusing, without
    Fornace's schema): one line on standard error naming it (passwords
    masked) and why, no traceback; the exit status (3)."""
    from fornace.common.db.engine import schema_revision
    from fornace.common.db.urls import passwords, shown

    reason = _reason(exc, passwords(url))
    try:
        if schema_revision(url) is None:
            reason += " (the schema is empty: run fornace db upgrade)"
    except Exception:  # noqa: BLE001 -- unreachable: the reason says so already
        pass
    print(f"fornace {command}: the database {shown(url)} cannot be used: {reason}",
          file=sys.stderr)
    return UNAVAILABLE


def _fail(shown: str, what: str, reason: str, code: int) -> int:
    """One line on standard error, no traceback: the database (``shown``, its
    password masked), what is wrong with it, and why."""
    print(f"fornace db: the database {shown} {what}: {reason}", file=sys.stderr)
    return code
