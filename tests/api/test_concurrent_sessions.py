"""Two users, two configuration sessions of one environment, deploying at once:
the one with nothing to deploy never wins over the one with changes (issue 29).
A session without changes still redeploys when no other holds changes."""
from __future__ import annotations

import pytest

from apikit import make_api, web_server

SESSION = "X-Configuration-Session"


@pytest.fixture
def api(tmp_path):
    return make_api(f"sqlite:///{tmp_path / 'sessions.sqlite'}")


def open_session(api, env_id: str, user: str) -> str:
    answer = api.client.post(f"/environments/{env_id}/configure",
                             headers=api.as_tenant("t1", user))
    assert answer.status_code == 200, answer.text
    return answer.json()["id"]


def deploy(api, env_id: str, session: str, user: str):
    return api.client.post(f"/environments/{env_id}/sessions/{session}/deploy",
                           headers=api.as_tenant("t1", user))


def test_an_empty_session_is_not_deployed_over_one_with_changes(api):
    env_id = api.client.post("/environments", json={"name": "shared"},
                             headers=api.as_tenant("t1", "alice")).json()["id"]
    alices, bobs = open_session(api, env_id, "alice"), open_session(api, env_id, "bob")
    added = api.client.post(f"/environments/{env_id}/services", json=web_server(),
                            headers={**api.as_tenant("t1", "alice"), SESSION: alices})
    assert added.status_code == 200, added.text
    refused = deploy(api, env_id, bobs, "bob")                 # bob has nothing to deploy
    assert refused.status_code == 409, refused.text
    message = refused.json()["error"]["message"]
    assert bobs in message and alices in message and "alice" in message
    assert api.client.get(f"/environments/{env_id}",
                          headers=api.as_tenant("t1", "bob")).json()["status"] != "deploying"
    assert deploy(api, env_id, alices, "alice").status_code == 200   # alice's changes go


def test_a_session_without_changes_redeploys_when_no_other_holds_changes(api):
    env_id = api.client.post("/environments", json={"name": "alone"},
                             headers=api.as_tenant("t1", "alice")).json()["id"]
    mine = open_session(api, env_id, "alice")
    open_session(api, env_id, "bob")                           # open, but unchanged
    assert deploy(api, env_id, mine, "alice").status_code == 200
