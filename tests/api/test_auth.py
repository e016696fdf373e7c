"""Keystone mode against a small Keystone v3 stand-in served over real HTTP."""
from __future__ import annotations

import datetime
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fastapi.testclient import TestClient
from keystoneauth1 import session as ks_session
from keystoneauth1.identity import v3

from fornace.api.app import create_app
from fornace.api.auth import KeystoneAuth, NoAuth
from fornace.api.store import Store
from fornace.common.db.engine import make_engine, session_factory, upgrade
from apikit import Published

SERVICE_TOKEN = "service-token"
USERS = {  # token -> (project id, user id, roles)
    "tok-alice": ("proj-a", "alice", ["member"]),
    "tok-bob": ("proj-b", "bob", ["member"]),
    "tok-admin": ("proj-a", "root", ["admin"]),
}


def token_body(project: str, user: str, roles: list[str]) -> dict:
    expires = (datetime.datetime.now(datetime.timezone.utc)
               + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.000000Z")
    return {"token": {"expires_at": expires, "issued_at": expires, "methods": ["password"],
                      "project": {"id": project, "name": project,
                                  "domain": {"id": "default", "name": "Default"}},
                      "user": {"id": user, "name": user,
                               "domain": {"id": "default", "name": "Default"}},
                      "roles": [{"id": r, "name": r} for r in roles], "catalog": []}}


class FakeKeystone(BaseHTTPRequestHandler):
    validations: list[str] = []

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _send(self, status: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # service user login
        length = int(self.headers.get("Content-Length", 0))
        request = json.loads(self.rfile.read(length))
        password = request["auth"]["identity"]["password"]["user"]["password"]
        if self.path != "/v3/auth/tokens" or password != "service-secret":
            self._send(401, {"error": {"code": 401, "message": "bad credentials"}})
            return
        self._send(201, token_body("service", "fornace", ["service"]),
                   {"X-Subject-Token": SERVICE_TOKEN})

    def do_GET(self) -> None:  # token validation
        if self.path != "/v3/auth/tokens" or self.headers.get("X-Auth-Token") != SERVICE_TOKEN:
            self._send(401, {"error": {"code": 401, "message": "not authenticated"}})
            return
        subject = self.headers.get("X-Subject-Token", "")
        FakeKeystone.validations.append(subject)
        if subject not in USERS:
            self._send(404, {"error": {"code": 404, "message": "token not found"}})
            return
        self._send(200, token_body(*USERS[subject]))


@pytest.fixture
def keystone_api(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeKeystone)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    auth_url = f"http://127.0.0.1:{server.server_port}/v3"
    plugin = v3.Password(auth_url=auth_url, username="fornace", password="service-secret",
                         project_name="service", user_domain_name="Default",
                         project_domain_name="Default")
    auth = KeystoneAuth(ks_session.Session(auth=plugin), auth_url, cache_seconds=60)
    url = f"sqlite:///{tmp_path / 'ks.sqlite'}"
    upgrade(url)
    store = Store(session_factory(make_engine(url)), Published())
    FakeKeystone.validations = []
    yield TestClient(create_app(store, auth)), auth
    server.shutdown()


def test_valid_tokens_map_to_their_project(keystone_api):
    client, _ = keystone_api
    created = client.post("/environments", json={"name": "a-env"},
                          headers={"X-Auth-Token": "tok-alice"})
    assert created.status_code == 200
    assert created.json()["tenant_id"] == "proj-a"
    assert client.get("/environments", headers={"X-Auth-Token": "tok-bob"}).json() == \
        {"environments": []}
    env_id = created.json()["id"]
    assert client.get(f"/environments/{env_id}",
                      headers={"X-Auth-Token": "tok-bob"}).status_code == 403
    assert client.get(f"/environments/{env_id}",
                      headers={"X-Auth-Token": "tok-alice"}).status_code == 200


@pytest.mark.parametrize("headers", [{}, {"X-Auth-Token": "forged"},
                                     {"X-Tenant-Id": "proj-a", "X-User-Id": "alice"}])
def test_missing_or_bad_token_is_401(keystone_api, headers):
    client, _ = keystone_api
    response = client.get("/environments", headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == 401


def test_validations_are_cached(keystone_api):
    client, _ = keystone_api
    for _ in range(5):
        assert client.get("/environments", headers={"X-Auth-Token": "tok-alice"}).status_code \
            == 200
    assert FakeKeystone.validations.count("tok-alice") == 1


def test_cache_expires(keystone_api):
    client, auth = keystone_api
    auth.cache_seconds = 0
    for _ in range(2):
        client.get("/environments", headers={"X-Auth-Token": "tok-alice"})
    assert FakeKeystone.validations.count("tok-alice") == 2


def test_admin_may_list_all_tenants_others_may_not(keystone_api):
    client, _ = keystone_api
    client.post("/environments", json={"name": "b-env"}, headers={"X-Auth-Token": "tok-bob"})
    denied = client.get("/environments", params={"all_tenants": "true", "tenant": "proj-b"},
                        headers={"X-Auth-Token": "tok-alice"})
    assert denied.status_code == 403
    allowed = client.get("/environments", params={"tenant": "proj-b"},
                         headers={"X-Auth-Token": "tok-admin"})
    assert [e["name"] for e in allowed.json()["environments"]] == ["b-env"]


def test_noauth_uses_headers_then_defaults(tmp_path):
    url = f"sqlite:///{tmp_path / 'na.sqlite'}"
    upgrade(url)
    client = TestClient(create_app(Store(session_factory(make_engine(url)), Published()),
                                   NoAuth("default-t", "default-u")))
    assert client.post("/environments", json={"name": "x"}).json()["tenant_id"] == "default-t"
    assert client.post("/environments", json={"name": "y"},
                       headers={"X-Tenant-Id": "other"}).json()["tenant_id"] == "other"
