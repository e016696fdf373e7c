"""Statements built once, run with bound values, for the hot paths.

Building a statement (``select(...).where(...).options(...)``) and computing
its cache key costs SQLAlchemy more than running it: on the test machine an
ORM read of a job and its environment with loader options took 320 us built
per call against 53 us built once, a one-row UPDATE 73 against 20 (SQLite in
memory, so mostly Python).  A statement built once with ``bindparam()``
placeholders keeps its cache key; only the values change.

:func:`row_update` is the UPDATE of some columns of one row by its ``id``;
:func:`update_row` runs it.  Other hot statements are built once where they
are used (``functools.cache`` on a function that builds them).
"""
from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Table, bindparam, update
from sqlalchemy.sql.dml import Update

ROW_ID = "row_id"   # the bound name of the row's id in row_update's statements


@functools.lru_cache(maxsize=256)
def row_update(table: Table, names: tuple[str, ...],
               increments: tuple[str, ...] = ()) -> Update:
    """``UPDATE table SET name = :v_name ..., counter = counter + 1 ... WHERE id =
    :row_id`` for the columns ``names`` and ``increments``."""
    values: dict[str, Any] = {name: bindparam(f"v_{name}", type_=table.c[name].type)
                              for name in names}
    values.update({name: table.c[name] + 1 for name in increments})
    return update(table).where(table.c.id == bindparam(ROW_ID)).values(values)


def update_row(db: Any, model: Any, row_id: str, increments: tuple[str, ...] = (),
               **values: Any) -> int:
    """Set ``values`` (and add 1 to the columns ``increments``) on the row
    ``row_id`` of the table of ``model`` (a mapped class or a Table), in the
    transaction of ``db`` (a Session or a Connection): a plain UPDATE, objects
    loaded in a session are not refreshed.  How many rows it changed."""
    table = getattr(model, "__table__", model)
    statement = row_update(table, tuple(values), increments)
    parameters = {f"v_{name}": value for name, value in values.items()}
    parameters[ROW_ID] = row_id
    return db.execute(statement, parameters).rowcount
