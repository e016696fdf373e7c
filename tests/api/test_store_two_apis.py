"""Two API processes storing one job's reports, events and result on one
database (:mod:`fornace.api.jobfacts`, :mod:`fornace.api.jobnodes`,
:mod:`fornace.api.jobsecrets`): what one process keeps of a job between
batches never lets in what the other process, or a conductor's takeover,
made stale -- on SQLite and on the real PostgreSQL."""
from __future__ import annotations

import copy
import datetime

import pytest
from sqlalchemy import select

from fornace.api.stores.store import Store
from fornace.common import contract
from fornace.common.db.engine import make_engine, session_factory
from fornace.common.db.models import Job
from fornace.conductor.jobs.lock import JobLock
from test_jobs_api import _api, action, deployed, new_env, linux_site
from apikit import web_server


@pytest.fixture(params=["sqlite", "postgres"])
def api(request, tmp_path):
    yield from _api(request.param, tmp_path)


@pytest.fixture
def other(api):
    """A second API process's store: its own engine on the same database."""
    engine = make_engine(api.store.sessions.kw["bind"].url.render_as_string(
        hide_password=False))
    yield Store(session_factory(engine), lambda body, message_id: None, api.store.catalog)
    engine.dispose()


def _report(env_id, text, fence=None, level="info"):
    body = contract.report_body(env_id, "environment", text, level, env_id)
    return body if fence is None else contract.fenced(body, fence)


def _texts(api, env_id, job_id):
    return [r["text"] for r in api.client.get(
        f"/environments/{env_id}/deployments/{job_id}").json()["reports"]]


def _takeover(api, env_id, job_id):
    """conductor-a holds the lock, falls silent, conductor-b takes it over."""
    now = [datetime.datetime(2030, 1, 1)]
    lock = JobLock(api.store.sessions.kw["bind"], clock=lambda: now[0])
    old = lock.acquire(env_id, job_id, "conductor-a")

    def take() -> int:
        now[0] += datetime.timedelta(seconds=120)
        return lock.acquire(env_id, job_id, "conductor-b", stale_after=60).token
    return old.token, take


def test_a_takeover_between_two_batches_fences_the_old_run_out(api, other):
    """A process that stored the old run's reports (and kept the job's secrets)
    drops that run's next batch once the other process... or anyone raised the
    lock token: the token is read with each batch, never kept."""
    env_id, _ = deployed(api)
    job = action(api, env_id, "check", {}).json()["id"]
    old, take = _takeover(api, env_id, job)
    for store in (api.store, other):   # both processes know the job and its old token
        assert store.reports.add_all([(_report(env_id, f"a1 via {id(store)}", old),
                                       f"{job}-report-{id(store)}")]) == [None]
    new = take()
    outcomes = api.store.reports.add_all([
        (_report(env_id, "a2 (old run)", old), f"{job}-report-a2"),
        (_report(env_id, "b1 (new run)", new), f"{job}-report-b1"),
        (_report(env_id, "no token (0.2 sender)"), f"{job}-report-x")])
    assert outcomes == [None, None, None]
    other.reports.add_all([(_report(env_id, "a3 (old run)", old), f"{job}-report-a3")])
    texts = _texts(api, env_id, job)
    assert "b1 (new run)" in texts and "no token (0.2 sender)" in texts
    assert not [t for t in texts if "old run" in t]
    # job events of the old run are fenced off the same way, in either process
    for store in (api.store, other):
        store.job_events.apply_all([(contract.fenced(contract.task_event_body(
            env_id, job, {"change_id": f"old-{id(store)}", "status": "ok"}), old), None)])
    shown = api.client.get(f"/environments/{env_id}/jobs/{job}").json()
    assert shown["tasks"] == [] and shown["state"] == "running"


def test_a_job_ended_by_the_other_process(api, other):
    """Process A stored reports of a running job; process B stores its result.
    A's next error report finds the job ended (a late error: completed with
    errors, the environment a deploy failure), a redelivered one is stored once,
    and reports of a job B abandoned are dropped."""
    env_id, session = new_env(api.client, [web_server()])
    api.client.post(f"/environments/{env_id}/sessions/{session}/deploy")
    body, job = api.published.tasks[-1]
    secret = body["services"][0]["adminPassword"]
    api.store.reports.add_all([(_report(env_id, f"uses {secret}"), f"{job}-report-1")])
    other.results.apply(contract.result_body(copy.deepcopy(body)), job)
    assert api.client.get(f"/environments/{env_id}/jobs/{job}").json()["state"] == "success"
    late = (_report(env_id, f"failed with {secret}", level="error"), f"{job}-report-2")
    assert api.store.reports.add_all([late, late]) == [None, None]
    other.reports.add_all([late])   # redelivered to the other process
    assert api.client.get(f"/environments/{env_id}/jobs/{job}").json()["state"] == \
        "completed_w_errors"
    assert api.client.get(f"/environments/{env_id}").json()["status"] == "deploy failure"
    texts = _texts(api, env_id, job)
    assert texts == ["uses ***", "failed with ***"]

    check = action(api, env_id, "check", {}).json()["id"]
    api.store.reports.add_all([(_report(env_id, "check runs"), f"{check}-report-1")])
    abandoned = api.client.post(f"/environments/{env_id}/abandon")
    assert abandoned.status_code == 200, abandoned.text
    other.reports.add_all([(_report(env_id, "after the abandon"), f"{check}-report-2")])
    api.store.reports.add_all([(_report(env_id, "after the abandon too"),
                                f"{check}-report-3")])
    assert [t for t in _texts(api, env_id, check) if "after the abandon" in t] == []


def _nodes(api, job_id):
    with api.store.sessions() as db:
        return db.scalar(select(Job.nodes).where(Job.id == job_id))


def test_node_states_merge_from_both_processes(api, other):
    """Each process merges only the nodes that moved: neither loses the
    other's, the last state of a node replaces its previous one whole (as
    ``{**old, **new}``), a null stays a null."""
    env_id, _ = deployed(api, [linux_site()])
    job = action(api, env_id, "check", {}).json()["id"]

    def nodes(store, message_id, moved):
        assert store.job_events.apply_all([(contract.task_events_body(
            env_id, job, [], moved), message_id)]) == [None]

    nodes(api.store, "n1", {"u1": {"state": "creating", "local": "pending"},
                            "u2": {"state": "creating", "local": None}})
    nodes(other, "n2", {"u3": {"state": "creating"}})
    nodes(api.store, "n3", {"u1": {"state": "created"}})
    assert _nodes(api, job) == {"u1": {"state": "created"},
                                "u2": {"state": "creating", "local": None},
                                "u3": {"state": "creating"}}
    # several events of one batch: in their order
    assert other.job_events.apply_all([
        (contract.task_events_body(env_id, job, [], {"u2": {"state": "created"}}), "n4"),
        (contract.task_events_body(env_id, job, [], {"u2": {"state": "configured"},
                                                     "u4": {"state": "initial"}}), "n5"),
    ]) == [None, None]
    assert _nodes(api, job) == {"u1": {"state": "created"}, "u2": {"state": "configured"},
                                "u3": {"state": "creating"}, "u4": {"state": "initial"}}
