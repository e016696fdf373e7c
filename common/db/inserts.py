"""Inserts for the paths that write many rows or race other writers.

:func:`insert_or_nothing`: ``INSERT ... ON CONFLICT DO NOTHING`` lets a row
already there stand, no error, so the transaction goes on (PostgreSQL and
SQLite).  Why: a plain insert racing another writer fails with an
IntegrityError, which on PostgreSQL also aborts the whole transaction;
asking first costs a round trip per insert and still races.
:func:`insert_or_replace`: ``INSERT ... ON CONFLICT DO UPDATE``, the row's
other columns replaced where it exists, in one statement.

:func:`insert_rows`: many rows in one statement (``COPY`` on PostgreSQL).
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

from sqlalchemy import bindparam, insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.dialects import postgresql, sqlite

COPY_FROM = 20   # rows from which insert_rows copies rather than inserts, on PostgreSQL

_DIALECTS = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}


def insert_or_nothing(dialect_name: str, table: Any) -> Any | None:
    """An insert into ``table`` that does nothing where its row exists (the
    statement, to give values to); None on a database without one."""
    make = _DIALECTS.get(dialect_name)
    return make(table).on_conflict_do_nothing() if make is not None else None


def insert_or_replace(dialect_name: str, table: Any, keys: Sequence[str],
                      names: Sequence[str]) -> Any | None:
    """An insert into ``table`` of the columns ``names`` (values bound by those
    names) that, where a row of the same ``keys`` (its primary key or a unique
    index) exists, sets that row's other columns instead; None on a database
    without one.  Built once per shape (:mod:`fornace.common.db.prepared`)."""
    return _insert_or_replace(dialect_name, table, tuple(keys), tuple(names))


@functools.lru_cache(maxsize=64)
def _insert_or_replace(dialect_name: str, table: Any, keys: tuple[str, ...],
                       names: tuple[str, ...]) -> Any | None:
    make = _DIALECTS.get(dialect_name)
    if make is None:
        return None
    statement = make(table).values({name: bindparam(name, type_=table.c[name].type)
                                    for name in names})
    return statement.on_conflict_do_update(
        index_elements=list(keys),
        set_={name: statement.excluded[name] for name in names if name not in keys})


def insert_rows(db: Any, table: Any, rows: Sequence[dict[str, Any]]) -> None:
    """Insert ``rows`` (dicts of the same keys) into ``table`` in the
    transaction of ``db`` (an ORM Session).

    On PostgreSQL through psycopg they go by ``COPY ... FROM STDIN``: one
    statement for the lot, where an executemany sends a statement per row
    (the 4000 reports of a thousand-unit deployment: 45 ms instead of 72-105
    on the idle test machine).  As with the insert it replaces,
    a row that breaks a constraint fails the whole statement.  Elsewhere, an
    executemany."""
    if len(rows) < COPY_FROM or db.get_bind().dialect.driver != "psycopg":
        if rows:
            db.execute(insert(table), rows)
        return
    import psycopg

    columns = list(rows[0])
    statement = 'COPY "{}" ({}) FROM STDIN'.format(
        table.name, ", ".join(f'"{name}"' for name in columns))
    raw = db.connection().connection.driver_connection   # this transaction's
    try:
        with raw.cursor() as cursor:
            with cursor.copy(statement) as copy:
                for row in rows:
                    copy.write_row([row[name] for name in columns])
    except psycopg.Error as exc:   # as SQLAlchemy raises them: IntegrityError, ...
        raise DBAPIError.instance(statement, None, exc, psycopg.Error) from exc
