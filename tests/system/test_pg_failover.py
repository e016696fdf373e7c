"""Fornace on a PostgreSQL primary with a synchronous standby: the primary dies,
the standby is promoted, and the services go on.

The pair is ``tools/pgstandby.py``'s (private clusters on spare ports, removed
afterwards; never the machine's own).  The API and a conductor use its
multi-host URL (``?host=primary&host=standby&target_session_attrs=read-write``),
migrations included.  The primary is stopped as a crash would (``pg_ctl stop
-m immediate``) at a moment an event decides, the standby promoted as an
operator (or Patroni) would -- Fornace promotes nothing -- and then: the API
answered 503 (not 500) while no server took writes, serves again, nothing
committed before the stop is missing (the primary waited for the standby
on every commit), and a deployment that was running ends as it would have.

The recovery times (promotion to the first answer, to the lock released)
are printed: ``pytest -s`` shows them.
"""
from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from apikit import free_port
from fornace.api.server import ApiService
from fornace.cli.main import build_conf, main
from fornace.common.db.engine import head_revision
from fornace.common.db.models import JobLock
from services import pg_server_tool, private_vhost, tool
from test_faults import open_world, site_reports
from waiting import wait_for



pgstandby = tool("pgstandby")


@pytest.fixture
def pair():
    pg_server_tool()
    with pgstandby.started() as started:
        yield started


def answer(client: TestClient, path: str) -> tuple[int, dict]:
    response = client.get(path)
    return response.status_code, response.json()


def test_the_api_answers_503_during_the_failover_and_serves_again_after_the_promotion(
        pair, capsys):
    """Regression: while no server took writes every request was a 500
    ("unexpected error: OperationalError") -- nothing a client could tell from
    a bug in the API."""
    url = pair.create_database("fornace")
    conf = build_conf()
    conf(["api"], default_config_files=[])
    api = ApiService(conf, url)   # the migrations run through the multi-host URL
    try:
        client = TestClient(api.app)
        before = client.post("/environments", json={"name": "before"}).json()["id"]
        pair.stop_primary()
        status, body = answer(client, "/environments")
        assert status == 503, body
        assert body["error"]["message"] == "the database is out of reach for a moment; try again"
        assert client.get("/environments").headers["Retry-After"] == "2"

        promoted = pair.promote()
        wait_for(lambda: answer(client, "/environments")[0] == 200,
                 "the API to serve again after the promotion")
        recovery = time.monotonic() - promoted
        with capsys.disabled():
            print(f"\nAPI: first answer {recovery:.3f} s after the promotion")
        names = {e["id"]: e["name"] for e in client.get("/environments").json()["environments"]}
        assert names == {before: "before"}                       # committed: not lost
        response = client.post("/environments", json={"name": "after"})   # writes go through
        assert response.status_code == 200, response.text
        [server] = pair.execute(pair.standby, "SELECT count(*) FROM environments", "fornace")
        assert server == (2,)                                    # on the new primary
    finally:
        api.stop()
    assert main(["db", "current", "--db", url]) == 0      # the old primary is still down
    hosts = f"host=127.0.0.1:{pair.primary.port}&host=127.0.0.1:{pair.standby.port}"
    assert f"postgresql+psycopg://postgres@/fornace?{hosts}&target_session_attrs=read-write: " \
        f"revision {head_revision()} (the newest)" in capsys.readouterr().out


def test_a_deployment_survives_the_primary_dying_and_the_standby_taking_over(pair):
    """The primary dies while a unit's plan runs; the plan ends while no server
    takes writes (its reports wait in RabbitMQ, the conductor's lock release is
    tried again); the standby is promoted on the first failed release.  The
    deployment ends ready, every report stored once (those stored before the
    crash still there), the lock freed, and a new deployment runs."""
    url = pair.create_database("fornace")
    port = free_port()
    with private_vhost("fornace-pgfailover") as rabbit, open_world(rabbit, url) as world:
        conductor = world.start_conductor()
        env_id, deployment_id = world.deploy("site", units=1, port=port)
        wait_for(lambda: world.started("web1"), "web1 to run its deployment script",
                 explain=world.explain)
        stored_before = world.wait_reports(deployment_id, 3)   # creating, created, deploying
        assert "Deploying the web site on web1" in {text for _, _, text in stored_before}

        pair.stop_primary()
        assert answer(world.client, f"/environments/{env_id}")[0] == 503
        world.open_gate()       # the plan ends: its reports and result meet the outage
        wait_for(lambda: "releasing the lock failed" in world.log(conductor),
                 "the conductor's lock release to meet the outage", explain=world.explain)
        promoted = pair.promote()

        def ended() -> dict | None:
            status, body = answer(world.client, f"/environments/{env_id}")
            return body if status == 200 and body["status"] not in ("deploying", "pending") \
                else None
        first = wait_for(lambda: answer(world.client, "/environments")[0] == 200 and
                         time.monotonic(), "the API to serve again", explain=world.explain)
        released = wait_for(lambda: "released the lock" in world.log(conductor) and
                            time.monotonic(), "the conductor to release the lock",
                            explain=world.explain)
        environment = wait_for(ended, "the deployment to end", explain=world.explain)
        print(f"\nAPI: first answer {first - promoted:.3f} s after the promotion; conductor: "
              f"lock released {released - promoted:.3f} s after it")

        assert environment["status"] == "ready", world.texts(env_id)
        stored = site_reports(world, environment, deployment_id, port)   # each once
        assert set(stored_before) <= set(stored)                 # committed: not lost
        assert world.runs(env_id, "web1") == 1
        deployments = world.client.get(f"/environments/{env_id}/deployments").json()
        assert [d["state"] for d in deployments["deployments"]] == ["success"]
        with world.api.engine.connect() as db:
            lock = db.execute(select(JobLock.job_id, JobLock.done_job).where(
                JobLock.environment_id == env_id)).one()
        assert lock == (None, deployment_id)                     # freed, the job remembered

        # new work after the failover: another environment, deployed by the same conductor
        other_id, _ = world.deploy("other", units=1, port=free_port())
        assert world.wait_end(other_id)["status"] == "ready", world.texts(other_id)
        assert conductor.poll() is None
        [server] = pair.execute(pair.standby, "SELECT count(*) FROM job_locks", "fornace")
        assert server == (2,)


def test_a_job_that_comes_while_no_server_takes_writes_waits_for_its_lock(pair):
    """Regression: a task taken while the primary was down ran at once without
    the environment's lock ("job lock unavailable ... running job without
    it"), so nothing kept a second conductor from running it too.  Now taking
    the lock is tried again across the failover, and the job runs holding it."""
    url = pair.create_database("fornace")
    with private_vhost("fornace-pgfailover") as rabbit, open_world(rabbit, url) as world:
        world.open_gate()
        env_id, deployment_id = world.deploy("site", units=1, port=free_port())  # queued
        pair.stop_primary()
        conductor = world.start_conductor()           # takes the task during the outage
        wait_for(lambda: "taking the lock failed" in world.log(conductor),
                 "the conductor to try the lock during the outage", explain=world.explain)
        pair.promote()
        wait_for(lambda: f"job {deployment_id} holds the lock" in world.log(conductor),
                 "the job to take its lock after the promotion", explain=world.explain)
        assert world.wait_end(env_id)["status"] == "ready", world.texts(env_id)
        assert "without it" not in world.log(conductor)
        with world.api.engine.connect() as db:
            lock = db.execute(select(JobLock.job_id, JobLock.done_job, JobLock.token).where(
                JobLock.environment_id == env_id)).one()
        assert lock == (None, deployment_id, 1)
