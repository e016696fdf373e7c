"""A dead connection found by a statement: the work is run once more only when
that cannot apply a write twice (:mod:`fornace.common.db.replay`), on the real
PostgreSQL with connections killed by ``pg_terminate_backend``."""
from __future__ import annotations

from typing import Callable

import pytest
from sqlalchemy import Engine, NullPool, create_engine, event, text
from sqlalchemy.exc import DBAPIError

from fornace.common.db.engine import make_engine
from fornace.common.db.replay import replayable, replayed
from services import postgres_url


@pytest.fixture
def engine():
    url = postgres_url()
    made = make_engine(url, pre_ping=False)
    made.backends = set()
    event.listen(made, "connect",
                 lambda dbapi, _record: made.backends.add(dbapi.info.backend_pid))
    with made.begin() as connection:
        connection.execute(text("DROP TABLE IF EXISTS replay_probe"))
        connection.execute(text("CREATE TABLE replay_probe (note text)"))
    yield made
    with made.begin() as connection:
        connection.execute(text("DROP TABLE replay_probe"))
    made.dispose()


def kill(engine: Engine, pids: set[int] | None = None) -> None:
    """Terminate the server side of ``engine``'s connections (all it opened),
    waiting until they are gone, as a restart or a failover would."""
    admin = create_engine(engine.url, poolclass=NullPool)
    with admin.connect() as connection:
        for pid in pids if pids is not None else engine.backends:
            connection.execute(text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": pid})
    admin.dispose()


def insert(engine: Engine, note: str) -> Callable[[], None]:
    def work() -> None:
        with engine.begin() as connection:
            connection.execute(text("INSERT INTO replay_probe VALUES (:note)"), {"note": note})
    return work


def notes(engine: Engine) -> list[str]:
    with engine.connect() as connection:
        return [n for (n,) in connection.execute(text("SELECT note FROM replay_probe"))]


def test_a_transaction_on_a_connection_killed_between_two_calls_is_run_once_more(engine):
    insert(engine, "first")()              # a connection in the pool
    kill(engine)
    replayed(insert(engine, "second"))     # found dead by the INSERT, run again
    assert sorted(notes(engine)) == ["first", "second"]


def test_a_read_on_a_killed_autocommit_connection_is_run_once_more(engine):
    reader = engine.execution_options(isolation_level="AUTOCOMMIT")

    def read() -> int:
        with reader.connect() as connection:
            return connection.execute(text("SELECT count(*) FROM replay_probe")).scalar()
    assert read() == 0
    kill(engine)
    assert replayed(read) == 0


def test_work_that_committed_before_it_found_a_dead_connection_is_not_run_again(engine):
    insert(engine, "warm")()

    def two_transactions() -> None:
        insert(engine, "once")()
        kill(engine)                       # between its two transactions
        insert(engine, "never")()
    with pytest.raises(DBAPIError) as raised:
        replayed(two_transactions)
    assert replayable(raised.value)        # alone it would have been run again
    assert sorted(notes(engine)) == ["once", "warm"]   # "once" not applied twice


def test_a_commit_that_fails_is_not_run_again(engine):
    """The connection dies as its COMMIT is sent: whether it was applied is
    unknown, so the failure goes up (the client decides)."""
    insert(engine, "warm")()
    calls = []

    def kill_at_commit(connection) -> None:
        if len(calls) == 1 and not killed:
            killed.append(connection.connection.dbapi_connection.info.backend_pid)
            kill(engine, set(killed))
    killed: list[int] = []

    def work() -> None:
        calls.append(1)
        insert(engine, "maybe")()
    event.listen(engine, "commit", kill_at_commit)
    try:
        with pytest.raises(DBAPIError) as raised:
            replayed(work)
    finally:
        event.remove(engine, "commit", kill_at_commit)
    assert raised.value.connection_invalidated and not replayable(raised.value)
    assert len(calls) == 1
    assert notes(engine).count("maybe") <= 1


def test_a_write_in_autocommit_is_not_run_again(engine):
    writer = engine.execution_options(isolation_level="AUTOCOMMIT")
    insert(engine, "warm")()
    kill(engine)

    def write() -> None:
        with writer.connect() as connection:
            connection.execute(text("INSERT INTO replay_probe VALUES ('auto')"))
    with pytest.raises(DBAPIError) as raised:
        replayed(write)
    assert raised.value.connection_invalidated and not replayable(raised.value)
