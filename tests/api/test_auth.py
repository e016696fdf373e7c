"""Keystone mode against the real Keystone of keystone-up (``identitykit``)."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg

import identitykit
from apikit import Published
from fornace.api import config
from fornace.api.app import create_app
from fornace.api.auth import KeystoneAuth, NoAuth
from fornace.api.stores.store import Store
from fornace.common.db.engine import make_engine, session_factory, upgrade
from services import keystone_url


keystone_conf = identitykit.api_conf


class Counting:
    """Counts the validations the authenticator asks Keystone for."""

    def __init__(self, auth: KeystoneAuth) -> None:
        self.tokens: list[str] = []
        validate = auth.keystone.validate

        def counted(token: str):
            self.tokens.append(token)
            return validate(token)
        auth.keystone.validate = counted


@pytest.fixture
def keystone_api(tmp_path):
    auth = KeystoneAuth.from_config(keystone_conf())
    url = f"sqlite:///{tmp_path / 'ks.sqlite'}"
    upgrade(url)
    store = Store(session_factory(make_engine(url)), Published())
    return TestClient(create_app(store, auth)), auth


def test_valid_tokens_map_to_their_project(keystone_api):
    client, _ = keystone_api
    alice, bob = identitykit.login("alice"), identitykit.login("bob")
    created = client.post("/environments", json={"name": "a-env"},
                          headers={"X-Auth-Token": alice.token})
    assert created.status_code == 200
    assert created.json()["tenant_id"] == alice.project_id
    assert client.get("/environments", headers={"X-Auth-Token": bob.token}).json() == \
        {"environments": []}
    env_id = created.json()["id"]
    assert client.get(f"/environments/{env_id}",
                      headers={"X-Auth-Token": bob.token}).status_code == 403
    assert client.get(f"/environments/{env_id}",
                      headers={"X-Auth-Token": alice.token}).status_code == 200


@pytest.mark.parametrize("headers", [{}, {"X-Auth-Token": "forged"},
                                     {"X-Tenant-Id": "proj-a", "X-User-Id": "alice"}])
def test_missing_or_bad_token_is_401_naming_keystone(keystone_api, headers):
    client, _ = keystone_api
    response = client.get("/environments", headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == 401
    assert response.headers["WWW-Authenticate"] == f'Keystone uri="{keystone_url()}"'


def test_a_revoked_token_is_refused_once_the_cache_lets_go(keystone_api):
    client, auth = keystone_api
    auth.cache_seconds = 0
    alice = identitykit.login("alice")
    headers = {"X-Auth-Token": alice.token}
    assert client.get("/environments", headers=headers).status_code == 200
    revoked = identitykit.identity(identitykit.admin(), "DELETE", "/auth/tokens",
                                   headers={"X-Subject-Token": alice.token})
    assert revoked.status_code == 204
    refused = client.get("/environments", headers=headers)
    assert refused.status_code == 401
    assert "invalid or expired" in refused.json()["error"]["message"]


def test_validations_are_cached(keystone_api):
    client, auth = keystone_api
    counting = Counting(auth)
    alice = identitykit.login("alice")
    for _ in range(5):
        assert client.get("/environments",
                          headers={"X-Auth-Token": alice.token}).status_code == 200
    assert counting.tokens == [alice.token]


def test_cache_seconds_zero_asks_keystone_every_time(keystone_api):
    client, auth = keystone_api
    auth.cache_seconds = 0
    counting = Counting(auth)
    alice = identitykit.login("alice")
    for _ in range(2):
        client.get("/environments", headers={"X-Auth-Token": alice.token})
    assert counting.tokens == [alice.token] * 2


def test_the_cache_never_outlives_the_token():
    """A long cache_seconds still asks Keystone again once the token's own
    expires_at has passed (the clock is the authenticator's)."""
    now = [0.0]
    auth = KeystoneAuth.from_config(keystone_conf())
    auth._clock = lambda: now[0]
    auth.cache_seconds = 10 ** 12
    counting = Counting(auth)
    alice = identitykit.login("alice")
    context = auth.context({"x-auth-token": alice.token})
    assert context.expires_at is not None and context.user_name == "alice"
    now[0] = context.expires_at - 1
    auth.context({"x-auth-token": alice.token})
    assert len(counting.tokens) == 1
    now[0] = context.expires_at + 1
    auth.context({"x-auth-token": alice.token})
    assert len(counting.tokens) == 2


@pytest.mark.parametrize("suffix", ["", "/v3"])
def test_auth_url_with_or_without_v3(suffix):
    root = keystone_url().rstrip("/").removesuffix("/v3")
    auth = KeystoneAuth.from_config(keystone_conf(root + suffix))
    alice = identitykit.login("alice")
    context = auth.context({"x-auth-token": alice.token})
    assert (context.tenant_id, context.user_id) == (alice.project_id, alice.user_id)
    assert {"member", "reader"} <= context.roles and context.project_name == "demo-a"


def test_keystone_mode_without_auth_url_is_a_clear_error():
    conf = cfg.ConfigOpts()
    config.register(conf)
    conf([])
    with pytest.raises(ValueError, match=r"\[keystone_authtoken\] auth_type and auth_url"):
        KeystoneAuth.from_config(conf)


def test_unreachable_keystone_is_a_401_saying_so(keystone_api):
    keystone_url()
    conf = keystone_conf("http://127.0.0.1:9/v3")
    auth = KeystoneAuth.from_config(conf)
    response = auth_refusal(auth, "some-token")
    assert "cannot validate the token" in response.message
    assert "some-token" not in response.message


def auth_refusal(auth: KeystoneAuth, token: str):
    from fornace.api.errors import Unauthorized
    with pytest.raises(Unauthorized) as refused:
        auth.context({"x-auth-token": token})
    return refused.value


def test_noauth_uses_headers_then_defaults(tmp_path):
    url = f"sqlite:///{tmp_path / 'na.sqlite'}"
    upgrade(url)
    client = TestClient(create_app(Store(session_factory(make_engine(url)), Published()),
                                   NoAuth("default-t", "default-u")))
    assert client.post("/environments", json={"name": "x"}).json()["tenant_id"] == "default-t"
    assert client.post("/environments", json={"name": "y"},
                       headers={"X-Tenant-Id": "other"}).json()["tenant_id"] == "other"
