"""The trusts the API makes for environments' jobs, against the real Keystone of
keystone-up: made at deploy time by the deploying user for the Fornace service
user, carried by the task, reused, replaced, and never left behind by a request
that fails."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

import identitykit
from apikit import Published
from fornace.api.app import create_app
from fornace.api.stores.store import Store
from fornace.api.trusts import Trusts
from fornace.common.db.engine import make_engine, session_factory, upgrade
from fornace.common.db.models import Environment


class Cloud:
    """A keystone-mode API whose published tasks are kept."""

    def __init__(self, tmp_path) -> None:
        auth = identitykit.keystone_auth()
        url = f"sqlite:///{tmp_path / 'trusts.sqlite'}"
        upgrade(url)
        self.published = Published()
        self.store = Store(session_factory(make_engine(url)), self.published,
                           trusts=Trusts(auth.keystone))
        self.client = TestClient(create_app(self.store, auth), raise_server_exceptions=False)
        self.service_user = identitykit.login("fornace").user_id

    def environment(self, token: str) -> str:
        created = self.client.post("/environments", json={"name": "trusted"},
                                   headers={"X-Auth-Token": token})
        assert created.status_code == 200, created.text
        return created.json()["id"]

    def deploy(self, token: str, env_id: str) -> dict:
        """Deploy a new session of ``env_id``; the task it sent (then the environment
        is made ready again, as if its result had come)."""
        headers = {"X-Auth-Token": token}
        session = self.client.post(f"/environments/{env_id}/configure",
                                   headers=headers).json()["id"]
        deployed = self.client.post(f"/environments/{env_id}/sessions/{session}/deploy",
                                    headers=headers)
        assert deployed.status_code == 200, deployed.text
        self.settle(env_id)
        return self.published.tasks[-1][0]

    def settle(self, env_id: str) -> None:
        with self.store.sessions.begin() as db:
            db.execute(update(Environment).where(Environment.id == env_id).values(
                state="ready", version=Environment.version + 1))

    def stored_trust(self, env_id: str) -> tuple[str | None, str | None]:
        with self.store.sessions() as db:
            env = db.get(Environment, env_id)
            return env.trust_id, env.trustor_id


@pytest.fixture
def cloud(tmp_path):
    return Cloud(tmp_path)


def test_a_deploy_makes_a_trust_from_the_user_to_the_service_user(cloud):
    alice = identitykit.login("alice")
    env_id = cloud.environment(alice.token)
    task = cloud.deploy(alice.token, env_id)
    trust_id = task["trust_id"]
    assert cloud.stored_trust(env_id) == (trust_id, alice.user_id)
    [trust] = [t for t in identitykit.trusts_of(alice.user_id) if t["id"] == trust_id]
    assert (trust["trustee_user_id"], trust["project_id"], trust["impersonation"]) == (
        cloud.service_user, alice.project_id, True)
    detail = identitykit.identity(identitykit.admin(), "GET",
                                  f"/OS-TRUST/trusts/{trust_id}/roles").json()["roles"]
    assert {r["name"] for r in detail} == {"member", "reader"}
    # the same user's next job reuses it; a plan makes none
    assert cloud.deploy(alice.token, env_id)["trust_id"] == trust_id
    plan = cloud.client.post(f"/environments/{env_id}/actions/plan", json={},
                             headers={"X-Auth-Token": alice.token})
    assert plan.status_code in (200, 202), plan.text
    assert cloud.published.tasks[-1][0]["trust_id"] == trust_id
    assert len([t for t in identitykit.trusts_of(alice.user_id)
                if t["project_id"] == alice.project_id and t["id"] == trust_id]) == 1
    cloud.store.trusts.discard(trust_id)


def test_another_users_job_replaces_the_trust(cloud):
    alice = identitykit.login("alice")
    env_id = cloud.environment(alice.token)
    first = cloud.deploy(alice.token, env_id)["trust_id"]
    with identitykit.temporary_user("demo-a", ["member"]) as carol_name:
        carol = identitykit.login(carol_name)
        second = cloud.deploy(carol.token, env_id)["trust_id"]
        assert second != first
        assert cloud.stored_trust(env_id) == (second, carol.user_id)
        assert not identitykit.trust_exists(first)    # replaced: deleted
        assert identitykit.trust_exists(second)
        cloud.store.trusts.discard(second)


def test_a_trust_gone_from_keystone_is_made_again(cloud):
    alice = identitykit.login("alice")
    env_id = cloud.environment(alice.token)
    first = cloud.deploy(alice.token, env_id)["trust_id"]
    cloud.store.trusts.keystone.delete_trust(first)   # e.g. by hand
    second = cloud.deploy(alice.token, env_id)["trust_id"]
    assert second != first and identitykit.trust_exists(second)
    assert cloud.stored_trust(env_id) == (second, alice.user_id)
    cloud.store.trusts.discard(second)


def test_a_request_that_fails_leaves_no_trust_behind(cloud):
    alice = identitykit.login("alice")
    env_id = cloud.environment(alice.token)
    first = cloud.deploy(alice.token, env_id)["trust_id"]
    with identitykit.temporary_user("demo-a", ["member"]) as carol_name:
        carol = identitykit.login(carol_name)
        cloud.published.fail = True   # the broker refuses the task: nothing started
        headers = {"X-Auth-Token": carol.token}
        session = cloud.client.post(f"/environments/{env_id}/configure",
                                    headers=headers).json()["id"]
        refused = cloud.client.post(f"/environments/{env_id}/sessions/{session}/deploy",
                                    headers=headers)
        assert refused.status_code == 503
        assert identitykit.trusts_of(carol.user_id) == []
    # alice's trust is still the environment's, and still there
    assert cloud.stored_trust(env_id) == (first, alice.user_id)
    assert identitykit.trust_exists(first)
    cloud.store.trusts.discard(first)


def test_deleting_an_environment_sends_its_trust_for_the_conductor(cloud):
    alice = identitykit.login("alice")
    env_id = cloud.environment(alice.token)
    trust_id = cloud.deploy(alice.token, env_id)["trust_id"]
    assert cloud.client.delete(f"/environments/{env_id}",
                               headers={"X-Auth-Token": alice.token}).status_code == 200
    deletion = cloud.published.tasks[-1][0]
    assert deletion["deleted"] is True and deletion["trust_id"] == trust_id
    assert identitykit.trust_exists(trust_id)   # the conductor deletes it once done
    cloud.store.trusts.discard(trust_id)


def test_a_never_deployed_environment_is_forgotten_without_a_trust(cloud):
    alice = identitykit.login("alice")
    before = {t["id"] for t in identitykit.trusts_of(alice.user_id)}
    env_id = cloud.environment(alice.token)
    assert cloud.client.delete(f"/environments/{env_id}",
                               headers={"X-Auth-Token": alice.token}).status_code == 200
    assert {t["id"] for t in identitykit.trusts_of(alice.user_id)} == before
