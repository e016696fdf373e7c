"""A job that finds its environment locked by another job waits for the lock
(issue 29): shown ``queued`` with the reason through the API, it runs once
the lock is freed, it is refused only after ``[conductor] lock_wait``, and a
stopping conductor leaves the wait (its task goes back to the queue).

The API, its consumers and a conductor run together on one database and one
broker: SQLite and a folder broker, and PostgreSQL and RabbitMQ.  The lock is
held by ``j-first`` at another conductor, as when the job before had its
result stored (the API took the next one) a moment before its conductor
freed the lock."""
from __future__ import annotations

import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient

from apikit import reset_postgres
from fornace.api.server import ApiService
from fornace.cli.main import build_conf
from fornace.common import contract
from fornace.common.broker import Broker
from fornace.conductor.daemon import Conductor, ConductorSettings
from fornace.conductor.jobs.lock import Grant, JobLock
from fornace.conductor.session import Settings
from services import postgres_url
from test_daemon import DATA, GatedStacks
from waiting import wait_for

ELSEWHERE = "conductor-elsewhere"
SITE = {"name": "site", "type": "linuxWebServer", "osImage": {"name": "debian"},
        "units": [{}]}


@dataclass
class Fornace:
    """The API (with its consumers) and the conductors started on one database
    and broker; the stacks of every conductor wait for ``gate``."""

    api: ApiService
    client: TestClient
    db: str
    broker: str
    lock: JobLock
    gate: threading.Event = field(default_factory=threading.Event)
    applied: list = field(default_factory=list)
    conductors: list = field(default_factory=list)

    def conductor(self, **settings: Any) -> Conductor:
        daemon = Conductor(ConductorSettings(
            broker_url=self.broker, data_dir=DATA, database_url=self.db, agents="simulator",
            max_environments=1, engine=Settings(agent_timeout=5), **settings),
            lambda task: GatedStacks(self.gate, self.applied))
        self.conductors.append(daemon)
        daemon.start()
        assert daemon.wait_ready()
        return daemon

    def locked_environment(self) -> tuple[str, str, Grant]:
        """A new environment with a service in an open session, its lock held by
        ``j-first`` at another conductor: (environment, session, that grant)."""
        env = self.client.post("/environments",
                               json={"name": f"wait-{uuid.uuid4().hex[:8]}"}).json()
        session = self.client.post(f"/environments/{env['id']}/configure").json()["id"]
        response = self.client.post(f"/environments/{env['id']}/services/", json=SITE,
                                    headers={"X-Configuration-Session": session})
        assert response.status_code == 200, response.text
        grant = self.lock.acquire(env["id"], "j-first", ELSEWHERE)
        assert isinstance(grant, Grant)
        return env["id"], session, grant

    def deploy(self, env_id: str, session: str) -> str:
        """Deploy the session (the API accepts it); the job's id."""
        response = self.client.post(f"/environments/{env_id}/sessions/{session}/deploy")
        assert response.status_code == 200, response.text
        return self.client.get(f"/environments/{env_id}/jobs").json()["jobs"][0]["id"]

    def job(self, env_id: str, job_id: str) -> dict[str, Any]:
        return self.client.get(f"/environments/{env_id}/jobs/{job_id}").json()

    def state(self, env_id: str, job_id: str, wanted: str) -> dict[str, Any] | None:
        """The job once its state is ``wanted`` (None before; an AssertionError
        when it ended otherwise: no need to wait any longer)."""
        job = self.job(env_id, job_id)
        if job["state"] == wanted:
            return job
        assert job["finished"] is None, (f"job {job_id} ended {job['state']}, not {wanted}: "
                                         f"{self.reports(env_id, job_id)}")
        return None

    def reports(self, env_id: str, job_id: str) -> list[tuple[str, str]]:
        found = self.client.get(f"/environments/{env_id}/deployments/{job_id}").json()
        return [(r["level"], r["text"]) for r in found["reports"]]


def _start(db: str, broker: str) -> Fornace:
    conf = build_conf()
    conf(["api"], default_config_files=[])
    conf.set_override("url", broker, group="broker")
    api = ApiService(conf, db)
    assert api.start_consumers().ready.wait(10)
    return Fornace(api, TestClient(api.app), db, broker, JobLock(db))


def _stop(fornace: Fornace) -> None:
    fornace.gate.set()
    for daemon in fornace.conductors:
        daemon.shutdown()
    fornace.lock.close()
    fornace.api.stop()


@pytest.fixture
def local(tmp_path):
    """On SQLite and a folder broker."""
    (tmp_path / "broker").mkdir()
    fornace = _start(f"sqlite:///{tmp_path / 'fornace.sqlite'}",
                     f"filesystem://{tmp_path / 'broker'}")
    yield fornace
    _stop(fornace)


@pytest.fixture(params=["sqlite-folder", "postgresql-rabbitmq"])
def fornace(request, tmp_path):
    if request.param == "sqlite-folder":
        yield request.getfixturevalue("local")
        return
    db = postgres_url()
    reset_postgres(db)
    fornace = _start(db, request.getfixturevalue("amqp_vhost"))
    yield fornace
    _stop(fornace)
    reset_postgres(db)


def test_a_job_finding_its_environment_locked_is_queued_then_runs_when_the_lock_is_freed(
        fornace):
    """Regression: the conductor ended such a job ``refused`` at once ("nothing was
    run") while the API had answered that it was accepted."""
    fornace.conductor()
    env_id, session, first = fornace.locked_environment()
    job_id = fornace.deploy(env_id, session)
    queued = wait_for(lambda: fornace.state(env_id, job_id, "queued"), "the job to be queued",
                      explain=lambda: repr(fornace.job(env_id, job_id)))
    assert queued["finished"] is None
    reports = fornace.reports(env_id, job_id)
    assert len(reports) == 1 and reports[0][0] == "info", reports
    assert f"environment {env_id} is locked by job j-first (conductor {ELSEWHERE})" \
        in reports[0][1] and f"job {job_id} waits for it" in reports[0][1]
    listed = fornace.client.get(f"/environments/{env_id}/jobs").json()["jobs"]
    assert [(j["id"], j["state"]) for j in listed] == [(job_id, "queued")]
    assert fornace.client.get(f"/environments/{env_id}").json()["status"] == "deploying"
    assert fornace.applied == []                        # nothing runs while it waits

    assert fornace.lock.release(first)                  # the job before lets go
    wait_for(lambda: fornace.state(env_id, job_id, "running"), "the job to run",
             explain=lambda: repr(fornace.job(env_id, job_id)))
    assert wait_for(lambda: fornace.applied, "the job's stack step")
    fornace.gate.set()
    done = wait_for(lambda: fornace.state(env_id, job_id, "success"), "the job to succeed",
                    explain=lambda: repr((fornace.job(env_id, job_id),
                                          fornace.reports(env_id, job_id))))
    assert done["finished"]
    assert fornace.client.get(f"/environments/{env_id}").json()["status"] == "ready"
    assert not any(level == "error" for level, _ in fornace.reports(env_id, job_id))


def test_a_job_still_locked_out_after_lock_wait_is_refused_saying_how_long_it_waited(local):
    local.conductor(lock_wait=1.0)
    env_id, session, first = local.locked_environment()
    job_id = local.deploy(env_id, session)
    wait_for(lambda: local.state(env_id, job_id, "queued"), "the job to be queued")
    refused = wait_for(lambda: local.state(env_id, job_id, "refused"), "the job to be refused",
                       explain=lambda: repr(local.job(env_id, job_id)))
    assert refused["finished"]
    (_, queued), (level, why) = local.reports(env_id, job_id)
    assert "waits for it (at most 1 s" in queued
    assert level == "error"
    assert f"environment {env_id} is locked by job j-first (conductor {ELSEWHERE})" in why
    assert re.search(rf"job {job_id} waited \d+\.\d s for it \(\[conductor\] lock_wait\); "
                     r"refused, nothing was run$", why), why
    assert local.applied == []
    assert local.lock.holder(env_id).job_id == "j-first"   # untouched
    # the session can be deployed again
    assert local.client.get(f"/environments/{env_id}/sessions/{session}").json()["state"] \
        == "open"


def test_a_stopping_conductor_leaves_the_wait_and_its_task_goes_back_to_the_queue(local):
    daemon = local.conductor()
    env_id, session, first = local.locked_environment()
    job_id = local.deploy(env_id, session)
    wait_for(lambda: local.state(env_id, job_id, "queued"), "the job to be queued")
    daemon.shutdown(timeout=60)      # leaves at once: the wait is no reason to hang
    assert not any(thread.is_alive() for thread in daemon._threads)
    assert local.job(env_id, job_id)["state"] == "queued"    # not refused, not answered
    assert local.applied == []
    local.lock.release(first)
    local.conductor()                                         # the task came back
    wait_for(lambda: local.applied, "the requeued job's stack step")
    # shown queued by the copy that stopped: running again, though this one never waited
    wait_for(lambda: local.state(env_id, job_id, "running"), "the requeued job to run",
             explain=lambda: repr(local.job(env_id, job_id)))
    local.gate.set()
    wait_for(lambda: local.state(env_id, job_id, "success"), "the requeued job to succeed",
             explain=lambda: repr(local.job(env_id, job_id)))


def test_a_queued_job_that_is_abandoned_leaves_the_wait_without_running(local, caplog):
    """A waiting job holds one of the conductor's consumer threads: once its job
    ended (abandoned, however it ended) the wait ends at the next look at the lock."""
    local.conductor()
    env_id, session, first = local.locked_environment()
    job_id = local.deploy(env_id, session)
    wait_for(lambda: local.state(env_id, job_id, "queued"), "the job to be queued")
    caplog.set_level("INFO", logger="fornace.conductor.daemon")
    assert local.client.post(f"/environments/{env_id}/abandon").status_code == 200
    wait_for(lambda: f"job {job_id} ended while it waited for the lock" in caplog.text,
             "the conductor to leave the wait", explain=lambda: caplog.text)
    assert local.applied == []
    assert local.job(env_id, job_id)["state"] == "abandoned"
    with Broker(local.broker) as broker:     # acknowledged: not back on the queue
        assert broker.drain(contract.TASKS, timeout=0.3) == []
