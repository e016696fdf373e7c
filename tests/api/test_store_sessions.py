"""The configuration sessions store (:mod:`fornace.api.stores.sessions`),
called directly: opening, who may see one, when one is no longer valid, and
deploying it as a job -- on SQLite and on the real PostgreSQL."""
from __future__ import annotations

import pytest

from fornace.api.context import Context
from fornace.api.errors import BadRequest, Conflict, Forbidden, NotFound, Unavailable
from fornace.common.db.models import ConfigSession, Job
from test_jobs_api import _api, finish
from apikit import web_server

ALICE = Context("t1", "u1")
CAROL = Context("t1", "u9")          # same project, another user
ADMIN = Context("t3", "u3", is_admin=True)


@pytest.fixture(params=["sqlite", "postgres"])
def api(request, tmp_path):
    yield from _api(request.param, tmp_path)


def new_session(api, name="dc1"):
    env = api.store.environments.create(ALICE, name)
    session = api.store.config_sessions.open(ALICE, env["id"])
    return env["id"], session["id"]


def test_a_session_is_its_users_and_makes_the_environment_pending(api):
    env_id, session_id = new_session(api)
    shown = api.store.config_sessions.get(ALICE, env_id, session_id)
    assert (shown["state"], shown["version"], shown["user_id"]) == ("open", 0, "u1")
    assert api.store.environments.get(ALICE, env_id)["status"] == "pending"
    with pytest.raises(Forbidden, match=f"not authorized to access session {session_id}"):
        api.store.config_sessions.get(CAROL, env_id, session_id)
    assert api.store.config_sessions.get(ADMIN, env_id, session_id)["id"] == session_id
    other = api.store.environments.create(ALICE, "dc2")["id"]
    with pytest.raises(NotFound, match=f"session {session_id} not found in environment"):
        api.store.config_sessions.get(ALICE, other, session_id)


def test_deploying_claims_the_environment_and_the_session(api):
    env_id, session_id = new_session(api)
    api.store.services.post(ALICE, env_id, "/", web_server(), session_id)
    with pytest.raises(BadRequest, match="change_detection"):
        api.store.config_sessions.deploy(ALICE, env_id, session_id, "sometimes")
    assert api.published.tasks == []
    api.store.config_sessions.deploy(ALICE, env_id, session_id)
    body, job_id = api.published.tasks[-1]
    assert body["job"] == {"id": job_id, "action": "deploy",
                           "parameters": {"change_detection": "evaluate"}}
    assert [s["name"] for s in body["services"]] == ["frontend"]
    assert api.store.config_sessions.get(ALICE, env_id, session_id)["state"] == "deploying"
    assert api.store.environments.get(ALICE, env_id)["status"] == "deploying"
    with pytest.raises(Conflict, match=f"job {job_id} \\(deploy\\) running since"):
        api.store.config_sessions.deploy(ALICE, env_id, session_id)
    with pytest.raises(Conflict, match=f"job {job_id}"):   # its deployment runs
        api.store.config_sessions.delete(ALICE, env_id, session_id)
    with api.store.sessions() as db:
        job = db.get(Job, job_id)
        assert (job.kind, job.session_id) == ("deploy", session_id)
        assert job.description["services"][0]["adminPassword"] == "***"   # kept masked


def test_a_deployment_makes_the_other_open_sessions_invalid(api):
    env_id, first = new_session(api)
    second = api.store.config_sessions.open(ALICE, env_id)["id"]
    api.store.config_sessions.deploy(ALICE, env_id, first)
    body, job_id = api.published.tasks[-1]
    finish(api, job_id, body)
    assert api.store.config_sessions.get(ALICE, env_id, first)["state"] == "deployed"
    with pytest.raises(Forbidden, match=f"session {second} is invalid"):
        api.store.config_sessions.get(ALICE, env_id, second)
    with pytest.raises(Forbidden, match=f"session {second} is invalid: another session"):
        api.store.config_sessions.deploy(ALICE, env_id, second)
    with pytest.raises(Forbidden, match=f"session {first} is already deployed"):
        api.store.config_sessions.deploy(ALICE, env_id, first)


def test_a_deploy_the_broker_refuses_leaves_everything_as_it_was(api):
    env_id, session_id = new_session(api)
    api.published.fail = True
    with pytest.raises(Unavailable, match="nothing was started"):
        api.store.config_sessions.deploy(ALICE, env_id, session_id)
    assert api.store.config_sessions.get(ALICE, env_id, session_id)["state"] == "open"
    assert api.store.environments.get(ALICE, env_id)["status"] == "pending"
    with api.store.sessions() as db:
        assert db.query(Job).count() == 0
    api.published.fail = False
    api.store.config_sessions.deploy(ALICE, env_id, session_id)     # and it can go again
    assert len(api.published.tasks) == 1


def test_a_deleted_session_is_gone(api):
    env_id, session_id = new_session(api)
    api.store.config_sessions.delete(ALICE, env_id, session_id)
    with api.store.sessions() as db:
        assert db.get(ConfigSession, session_id) is None
    assert api.store.environments.get(ALICE, env_id)["status"] == "ready"
