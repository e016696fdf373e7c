"""The services store (:mod:`fornace.api.stores.services`), called directly:
edits all or nothing, secrets masked on the way out and kept by ``***``,
edits only in an open session of an idle environment -- on SQLite and on the
real PostgreSQL.  Names and ``dependsOn`` are in test_names and
test_depends_on."""
from __future__ import annotations

import pytest

from fornace.api.context import Context
from fornace.api.errors import BadRequest, Conflict, Forbidden
from fornace.common.db.models import ConfigSession
from test_jobs_api import _api
from apikit import web_server

ALICE = Context("t1", "u1")


@pytest.fixture(params=["sqlite", "postgres"])
def api(request, tmp_path):
    yield from _api(request.param, tmp_path)


@pytest.fixture
def session(api):
    env = api.store.environments.create(ALICE, "dc1")
    return env["id"], api.store.config_sessions.open(ALICE, env["id"])["id"]


def stored(api, session_id):
    with api.store.sessions() as db:
        return db.get(ConfigSession, session_id).description["services"]


def test_an_added_service_comes_back_masked_and_is_stored_in_clear(api, session):
    env_id, session_id = session
    added = api.store.services.post(ALICE, env_id, "/", web_server(), session_id)
    assert added["adminPassword"] == "***" and added["name"] == "frontend"
    assert stored(api, session_id)[0]["adminPassword"] == "P@ssw0rd-web"
    path = f"/{added['id']}/adminPassword"
    assert api.store.services.get(ALICE, env_id, path, session_id) == "***"
    assert api.store.services.get(ALICE, env_id, "/", None) == []    # the deployed view


def test_a_put_of_the_mask_keeps_the_secret_and_a_new_value_replaces_it(api, session):
    env_id, session_id = session
    added = api.store.services.post(ALICE, env_id, "/", web_server(), session_id)
    api.store.services.put(ALICE, env_id, f"/{added['id']}/adminPassword", "***", session_id)
    assert stored(api, session_id)[0]["adminPassword"] == "P@ssw0rd-web"
    api.store.services.put(ALICE, env_id, f"/{added['id']}/adminPassword", "N3w-secret",
                           session_id)
    assert stored(api, session_id)[0]["adminPassword"] == "N3w-secret"


def test_a_list_with_a_wrong_entry_adds_nothing(api, session):
    env_id, session_id = session
    with pytest.raises(BadRequest, match=r"^services\[1\]\.units: "):
        api.store.services.post(ALICE, env_id, "/", [web_server("a"), web_server("b", units=7)],
                                session_id)
    with pytest.raises(BadRequest, match="the list is empty"):
        api.store.services.post(ALICE, env_id, "/", [], session_id)
    assert stored(api, session_id) == []
    added = api.store.services.post(ALICE, env_id, "/", [web_server("a"), web_server("b")],
                                    session_id)
    assert [s["name"] for s in added] == ["a", "b"]
    with pytest.raises(Conflict, match="a service named 'a'"):
        api.store.services.put(ALICE, env_id, f"/{added[1]['id']}/name", "a", session_id)
    assert [s["name"] for s in stored(api, session_id)] == ["a", "b"]


def test_removing_a_service_takes_it_out_of_the_others_depends_on(api, session):
    env_id, session_id = session
    db = api.store.services.post(ALICE, env_id, "/", web_server("db"), session_id)
    web = api.store.services.post(ALICE, env_id, "/", web_server("web", dependsOn=[db["id"]]),
                                  session_id)
    assert web["dependsOn"] == [db["id"]]
    api.store.services.delete(ALICE, env_id, f"/{db['id']}", session_id)
    assert [(s["name"], s["dependsOn"]) for s in stored(api, session_id)] == [("web", [])]
    api.store.services.delete(ALICE, env_id, "/", session_id)
    assert stored(api, session_id) == []


def test_edits_need_an_open_session_of_an_idle_environment(api, session):
    env_id, session_id = session
    with pytest.raises(BadRequest, match="X-Configuration-Session header is required"):
        api.store.services.post(ALICE, env_id, "/", web_server(), None)
    api.store.services.post(ALICE, env_id, "/", web_server(), session_id)
    api.store.config_sessions.deploy(ALICE, env_id, session_id)
    _, job_id = api.published.tasks[-1]
    with pytest.raises(Conflict, match=f"job {job_id}"):
        api.store.services.post(ALICE, env_id, "/", web_server("b"), session_id)
    with pytest.raises(Forbidden):
        api.store.services.post(Context("t1", "u9"), env_id, "/", web_server("b"), session_id)
