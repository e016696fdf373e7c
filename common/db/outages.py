"""Database failures that pass by themselves, and a bounded retry across them.

The API's message store (what to requeue rather than set aside), the API's
answers (503, not 500) and the conductor (a lock release during a short
outage) ask the same question: :func:`transient`.  A failover is one of
those failures: the primary gone (connection refused, terminated), the
standby not promoted yet, or reached while still read-only.
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Iterable, TypeVar

from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

LOG = logging.getLogger(__name__)
T = TypeVar("T")

#: seconds between tries of :func:`retried`: about 15 s of outage in all
BACKOFF = (0.5, 1.0, 2.0, 4.0, 8.0)

#: PostgreSQL's "cannot execute ... in a read-only transaction": a standby
READ_ONLY = "25006"
# connection exceptions (class 08), and a server shutting down, crashed or
# starting -- an old primary stopping, a standby being promoted (57P01-57P03)
_OUTAGE_STATES = ("08", "57P01", "57P02", "57P03", READ_ONLY)


def sqlstate(exc: BaseException | None) -> str | None:
    """The SQLSTATE of a driver's error (or of the one SQLAlchemy wraps)."""
    if isinstance(exc, DBAPIError):
        exc = exc.orig
    return getattr(exc, "sqlstate", None)


def transient(exc: BaseException) -> bool:
    """Whether a failure may pass by itself: the database (or the network to
    it) out of reach, a connection lost, a pool exhausted, a deadlock or a
    serialization failure (PostgreSQL's are OperationalErrors), a failover
    under way (a server read-only, shutting down or starting).  Anything
    else would fail again."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    state = sqlstate(exc)
    if state is not None and state.startswith(_OUTAGE_STATES):
        return True
    return isinstance(exc, (OperationalError, InterfaceError, DisconnectionError, PoolTimeout,
                            ConnectionError, TimeoutError))


def described(exc: BaseException) -> str:
    """``Type: first line of the message`` (200 characters at most), for a log
    line: a driver's error may run over many lines (the SQL, its parameters)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:200]}" if text else type(exc).__name__


def retried(call: Callable[[], T], what: str, backoff: Iterable[float] | None = None,
            sleep: Callable[[float], object] = time.sleep) -> T:
    """``call()``, tried again after each delay of ``backoff`` (:data:`BACKOFF`)
    while it fails with a :func:`transient` error (each logged, naming
    ``what``); the last failure, or any other, goes up."""
    for delay in BACKOFF if backoff is None else backoff:
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 -- only transient ones are retried
            if not transient(exc):
                raise
            LOG.warning("%s failed (%s); trying again in %.1f s", what, described(exc), delay)
        sleep(delay)
    return call()
