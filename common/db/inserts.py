"""Inserts that let a row already there stand: ``INSERT ... ON CONFLICT DO
NOTHING``, no error, so the transaction goes on (PostgreSQL and SQLite).

Why: a plain insert racing another writer fails with an IntegrityError, which
on PostgreSQL also aborts the whole transaction; asking first costs a round
trip per insert and still races.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql, sqlite

_DIALECTS = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}


def insert_or_nothing(dialect_name: str, table: Any) -> Any | None:
    """An insert into ``table`` that does nothing where its row exists (the
    statement, to give values to); None on a database without one."""
    make = _DIALECTS.get(dialect_name)
    return make(table).on_conflict_do_nothing() if make is not None else None
