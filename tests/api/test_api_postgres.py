"""The API on the real PostgreSQL of this machine: migrations and concurrency."""
from __future__ import annotations

import threading

import pytest
from sqlalchemy import inspect

from fornace.common.db.engine import make_engine, upgrade
from apikit import make_api, reset_postgres, web_server
from services import postgres_url


@pytest.fixture
def pg_api():
    url = postgres_url()
    reset_postgres(url)
    api = make_api(url)
    yield api
    reset_postgres(url)


def test_upgrade_from_empty_creates_every_table():
    url = postgres_url()
    reset_postgres(url)
    upgrade(url)
    upgrade(url)  # a second upgrade is a no-op
    tables = set(inspect(make_engine(url)).get_table_names())
    assert {"environments", "sessions", "deployments", "statuses", "alembic_version"} <= tables
    reset_postgres(url)


def test_upgrade_from_empty_on_sqlite(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.sqlite'}"
    upgrade(url)
    assert {"environments", "sessions", "deployments", "statuses"} <= set(
        inspect(make_engine(url)).get_table_names())


@pytest.mark.parametrize("attempt", range(3))
def test_two_concurrent_deploys_exactly_one_wins(pg_api, attempt):
    api = pg_api
    env = api.client.post("/environments", json={"name": f"race{attempt}"}).json()
    sessions = []
    for name in ("a", "b"):
        session = api.client.post(f"/environments/{env['id']}/configure").json()["id"]
        api.client.post(f"/environments/{env['id']}/services/", json=web_server(name),
                        headers={"X-Configuration-Session": session})
        sessions.append(session)
    barrier = threading.Barrier(len(sessions))
    codes = []

    def deploy(session: str) -> None:
        barrier.wait()
        response = api.client.post(f"/environments/{env['id']}/sessions/{session}/deploy")
        codes.append(response.status_code)

    threads = [threading.Thread(target=deploy, args=(s,)) for s in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(codes) == [200, 409]     # the loser is told which job runs
    assert len(api.published.tasks) == 1
    deployments = api.client.get(f"/environments/{env['id']}/deployments").json()
    assert len(deployments["deployments"]) == 1
