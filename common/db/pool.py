"""What an engine's connection pool keeps, and how long a service waits for its
database at start-up: ``[database]``'s settings, named as oslo.db names them
(:mod:`fornace.common.options` reads them; :func:`fornace.common.db.engine.make_engine`
and :func:`~fornace.common.db.engine.wait_for_database` apply them).

Kept free of SQLAlchemy so that reading the options costs nothing."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Pool:
    """A PostgreSQL engine's pool (SQLite files keep SQLAlchemy's own).

    ``size``: connections kept open (``max_pool_size``; 0: no limit);
    ``overflow``: more opened under load and closed when given back
    (``max_overflow``; -1: no limit); ``timeout``: seconds a checkout waits
    for a free connection before it fails (``pool_timeout``; None:
    SQLAlchemy's 30); ``recycle``: seconds after which a connection is
    replaced when next checked out (``connection_recycle_time``; -1: never).
    """

    size: int = 30
    overflow: int = 0
    timeout: int | None = None
    recycle: int = 3600


@dataclass(frozen=True)
class StartupRetries:
    """How a service waits for a database out of reach when it starts:
    ``attempts`` more tries (``max_retries``; -1: for ever), ``interval``
    seconds apart (``retry_interval``)."""

    attempts: int = 10
    interval: float = 10.0

    def delays(self) -> Iterable[float]:
        """The waits between tries (an endless iterator for -1)."""
        if self.attempts < 0:
            return itertools.repeat(self.interval)
        return [self.interval] * self.attempts
