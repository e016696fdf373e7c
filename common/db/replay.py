"""A dead connection found by a request: the request's work tried once more.

An engine made without ``pool_pre_ping`` (:func:`fornace.common.db.engine.make_engine`
with ``pre_ping=False``: the API) asks the server nothing when it takes a
connection from its pool, which saves a round trip on every checkout; a
connection whose server went away (a restart, a failover,
``pg_terminate_backend``) is found dead by the first statement sent on it
instead.  SQLAlchemy then invalidates it and every other connection the pool
opened before (``is_disconnect``), so the next tries connect afresh, and
:func:`replayed` runs the work once more -- when, and only when, that cannot
apply a write twice.

The rule, kept by :func:`watch` (which marks the failures) and :func:`replayed`:

1. The failure is a disconnect (``is_disconnect``; a server found read-only
   counts, :mod:`fornace.common.db.engine`).
2. It was raised by a statement, not by COMMIT: a COMMIT whose connection
   died may or may not have been applied, and nothing tells which.
3. That statement cannot have applied anything by itself: either it ran in a
   transaction (not AUTOCOMMIT) -- the transaction was never committed, and a
   server rolls back the open transaction of a connection it loses (or it
   never received it) -- or it is a read (a ``SELECT``: the API's AUTOCOMMIT
   connections only read, :meth:`fornace.api.stores.store.Store.read`).
4. Nothing of the same attempt was committed before it: a COMMIT sent
   (SQLAlchemy's ``commit`` event fires before the driver sends it) or a
   statement other than a read run in AUTOCOMMIT.  The work is run again
   whole, so an earlier transaction of it would be applied twice.
5. Once: a second failure goes up as it is (a 503 for a transient one,
   :mod:`fornace.api.app`).

Work that is run again must leave nothing outside the database before its
commit (the API's stores publish a task only after the transaction that
claims it commits, and undo a trust they made when the work fails).
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, TypeVar

from sqlalchemy import Engine, event

from fornace.common.db.outages import described

LOG = logging.getLogger(__name__)
T = TypeVar("T")

_REPLAYABLE = "_fornace_replayable"
_attempt = threading.local()    # .committed: a commit sent during the current attempt


def watch(engine: Engine) -> None:
    """Mark ``engine``'s failures that :func:`replayed` may run again (rule 1-3)
    and note what an attempt commits (rule 4).  Listens after the engine's other
    error handlers (they may decide that an error is a disconnect)."""
    event.listen(engine, "handle_error", _mark)
    event.listen(engine, "commit", _committed)
    event.listen(engine, "before_cursor_execute", _autocommitted)


def _is_read(statement: str) -> bool:
    return statement.lstrip()[:6].upper() == "SELECT"


def _autocommit(connection: Any) -> bool:
    return connection is not None and \
        connection.get_execution_options().get("isolation_level") == "AUTOCOMMIT"


def _mark(context: Any) -> None:
    error = context.sqlalchemy_exception
    if error is None or not context.is_disconnect or context.statement is None:
        return                                                  # rules 1 and 2
    if _autocommit(context.connection) and not _is_read(context.statement):
        return                                                  # rule 3
    setattr(error, _REPLAYABLE, True)


def _committed(_connection: Any) -> None:
    _attempt.committed = True


def _autocommitted(connection: Any, _cursor: Any, statement: str, *_args: Any) -> None:
    if not _is_read(statement) and _autocommit(connection):
        _attempt.committed = True


def replayable(exc: BaseException) -> bool:
    """Whether ``exc`` is a dead connection found before anything was applied
    (rules 1-3; :func:`replayed` checks rule 4)."""
    return getattr(exc, _REPLAYABLE, False) is True


def replayed(call: Callable[[], T], what: str = "a request") -> T:
    """``call()``; run once more when it failed on a dead connection before
    anything of it was committed (the rule above).  Call it in the thread that
    runs the work (the commits are noted per thread); inside another
    :func:`replayed` it is only ``call()``: the outer one decides."""
    if getattr(_attempt, "active", False):
        return call()
    _attempt.active = True
    try:
        _attempt.committed = False
        try:
            return call()
        except Exception as exc:
            if not replayable(exc) or _attempt.committed:
                raise
            LOG.warning("%s found a dead database connection (%s); trying it once more",
                        what, described(exc))
        _attempt.committed = False
        return call()
    finally:
        _attempt.active = False
