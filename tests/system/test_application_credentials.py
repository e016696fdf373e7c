"""A user logged in with an application credential: Keystone lets no delegated
token make a trust, so a job that acts on the cloud is refused with a 403
saying what to do -- before anything is accepted -- and everything else works.
Real Keystone (keystone-up), the API in keystone mode; no conductor (nothing
may reach one)."""
from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

import identitykit
from fornace.api.server import ApiService
from fornace.cli.main import build_conf
from services import keystone_url


@pytest.fixture
def api(tmp_path):
    """(API service, client): keystone mode on keystone-up."""
    keystone_url()
    conf = build_conf()
    conf(["api"], default_config_files=[])
    conf.set_override("auth_mode", "keystone", group="api")
    conf.set_override("state_dir", str(tmp_path / "state"), group="api")
    identitykit.set_keystone_options(conf)
    service = ApiService(conf, f"sqlite:///{tmp_path / 'appcred.sqlite'}")
    yield service, TestClient(service.app)
    service.stop()


@pytest.fixture(params=[False, True], ids=["restricted", "unrestricted"])
def credential_token(request):
    """A token of alice's own application credential (deleted after the test)."""
    from keystoneauth1 import session
    from keystoneauth1.identity import v3
    alice = identitykit.login("alice")
    name = f"test-{uuid.uuid4().hex[:8]}"
    made = identitykit.identity(alice.session, "POST",
                                f"/users/{alice.user_id}/application_credentials",
                                json={"application_credential": {
                                    "name": name, "unrestricted": request.param}})
    assert made.status_code == 201, made.text
    credential = made.json()["application_credential"]
    try:
        token = session.Session(auth=v3.ApplicationCredential(
            auth_url=keystone_url(), application_credential_id=credential["id"],
            application_credential_secret=credential["secret"])).get_token()
        yield token, name, alice
    finally:
        identitykit.identity(alice.session, "DELETE", f"/users/{alice.user_id}"
                             f"/application_credentials/{credential['id']}")


def environment_with_a_session(client, token: str) -> tuple[str, str]:
    headers = {"X-Auth-Token": token}
    env = client.post("/environments", json={"name": f"ac-{uuid.uuid4().hex[:6]}"},
                      headers=headers)
    assert env.status_code == 200, env.text
    env_id = env.json()["id"]
    session = client.post(f"/environments/{env_id}/configure", headers=headers)
    assert session.status_code == 200, session.text
    service = client.post(f"/environments/{env_id}/services/", json={
        "name": "site", "type": "linuxWebServer", "unitNamingPattern": "web#",
        "osImage": {"name": "debian"}, "units": [{}]},
        headers={**headers, "X-Configuration-Session": session.json()["id"]})
    assert service.status_code == 200, service.text
    return env_id, session.json()["id"]


def test_a_deploy_is_refused_before_it_is_accepted_saying_what_to_do(api, credential_token):
    service, client = api
    token, name, alice = credential_token
    headers = {"X-Auth-Token": token}
    env_id, session_id = environment_with_a_session(client, token)   # editing works
    trusts_before = identitykit.trusts_of(alice.user_id)
    refused = client.post(f"/environments/{env_id}/sessions/{session_id}/deploy",
                          headers=headers)
    assert refused.status_code == 403, refused.text
    message = refused.json()["error"]["message"]
    assert f"application credential '{name}'" in message
    assert "Log in with your password" in message and "OS_AUTH_TYPE=password" in message
    # nothing was accepted: no deployment, the session still open, no trust
    assert client.get(f"/environments/{env_id}/deployments",
                      headers=headers).json()["deployments"] == []
    shown = client.get(f"/environments/{env_id}", headers=headers).json()
    assert shown["status"] != "deploying"
    assert identitykit.trusts_of(alice.user_id) == trusts_before
    # the session can still be deployed by alice logged in with her password
    assert client.get(f"/environments/{env_id}/sessions/{session_id}",
                      headers=headers).json()["state"] == "open"


def test_actions_are_refused_too_but_a_plan_is_not(api, credential_token):
    _, client = api
    token, _, _ = credential_token
    headers = {"X-Auth-Token": token}
    env_id, session_id = environment_with_a_session(client, token)
    plan = client.post(f"/environments/{env_id}/actions/plan", headers={
        **headers, "X-Configuration-Session": session_id}, json={})
    assert plan.status_code == 202, plan.text      # plans act on no cloud: no trust
    heal = client.post(f"/environments/{env_id}/actions/heal", headers=headers, json={})
    assert heal.status_code == 403, heal.text
    assert "Log in with your password" in heal.json()["error"]["message"]


def test_listing_and_deleting_an_undeployed_environment_work(api, credential_token):
    _, client = api
    token, _, alice = credential_token
    headers = {"X-Auth-Token": token}
    env_id, _ = environment_with_a_session(client, token)
    listed = client.get("/environments", headers=headers).json()["environments"]
    assert env_id in {env["id"] for env in listed}
    # a password login of the same user sees it: same project
    assert client.get(f"/environments/{env_id}",
                      headers={"X-Auth-Token": alice.token}).status_code == 200
    assert client.delete(f"/environments/{env_id}", headers=headers).status_code in (200, 204)
