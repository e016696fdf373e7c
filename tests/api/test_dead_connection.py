"""The API's connections are not pinged before each use: a request that finds
one dead (its server side terminated between two requests, as a restart or a
failover does) is run once more and succeeds, and a write is applied once
(:mod:`fornace.common.db.replay`).  On the real PostgreSQL."""
from __future__ import annotations

import logging

import pytest
from sqlalchemy import NullPool, create_engine, event, text

from apikit import make_api, reset_postgres
from services import postgres_url


@pytest.fixture
def api():
    url = postgres_url()
    reset_postgres(url)
    made = make_api(url, pre_ping=False)
    engine = made.store.sessions.kw["bind"]
    made.backends = set()
    event.listen(engine, "connect",
                 lambda dbapi, _record: made.backends.add(dbapi.info.backend_pid))
    yield made
    engine.dispose()
    reset_postgres(url)


def kill_connections(api) -> None:
    """Terminate the server side of every connection the API opened."""
    engine = api.store.sessions.kw["bind"]
    admin = create_engine(engine.url, poolclass=NullPool)
    with admin.connect() as connection:
        for pid in api.backends:
            connection.execute(text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": pid})
    admin.dispose()


def test_list_show_and_create_succeed_after_the_connections_were_killed(api, caplog):
    env_id = api.client.post("/environments", json={"name": "before"}).json()["id"]
    assert api.client.get(f"/environments/{env_id}").status_code == 200
    caplog.set_level(logging.WARNING, "fornace.common.db.replay")
    for request in (lambda: api.client.get("/environments"),
                    lambda: api.client.get(f"/environments/{env_id}"),
                    lambda: api.client.post("/environments", json={"name": "after"})):
        kill_connections(api)
        caplog.clear()
        answer = request()
        assert answer.status_code == 200, answer.text
        assert "found a dead database connection" in caplog.text   # it was run once more
    names = sorted(e["name"] for e in api.client.get("/environments").json()["environments"])
    assert names == ["after", "before"]                # the write applied once


def test_a_write_whose_commit_fails_is_not_run_again(api):
    api.client.get("/environments")
    engine = api.store.sessions.kw["bind"]
    killed: list[int] = []

    def kill_at_commit(connection) -> None:
        if not killed:
            killed.append(connection.connection.dbapi_connection.info.backend_pid)
            admin = create_engine(engine.url, poolclass=NullPool)
            with admin.connect() as other:
                other.execute(text("SELECT pg_terminate_backend(:pid, 5000)"),
                              {"pid": killed[0]})
            admin.dispose()
    event.listen(engine, "commit", kill_at_commit)
    try:
        answer = api.client.post("/environments", json={"name": "maybe"})
    finally:
        event.remove(engine, "commit", kill_at_commit)
    assert answer.status_code == 503, answer.text      # unknown outcome: the client decides
    names = [e["name"] for e in api.client.get("/environments").json()["environments"]]
    assert names.count("maybe") <= 1
