"""Cross-site protection of the JSON API: Origin/Referer checks, JSON-only bodies,
JSON errors for malformed Content-Types -- and the clients that must keep working
(the CLI's client over HTTP here, muranoclient in test_muranoclient.py, the
dashboard's forms in test_dashboard.py; a real browser in
test_crossorigin_browser.py)."""
from __future__ import annotations

import json
import socket

import pytest
from fastapi.testclient import TestClient

from apikit import make_api, web_server
from fornace.api.app import create_app
from fornace.api.crossorigin import OriginError, normalize_origin, parse_allowed_origins
from fornace.api.protocol import JsonH11Protocol
from fornace.cli.client.http import ApiClient, ClientError
from serving import serving
from test_dashboard import page_token

OWN = "http://testserver"          # the TestClient's scheme and Host
FOREIGN = "http://evil.example"


@pytest.fixture
def api(tmp_path):
    return make_api(f"sqlite:///{tmp_path / 'xo.sqlite'}")


@pytest.fixture
def env(api):
    """(env id, session id) of an environment with an open session."""
    env_id = api.client.post("/environments", json={"name": "xo"}).json()["id"]
    session_id = api.client.post(f"/environments/{env_id}/configure").json()["id"]
    return env_id, session_id


def error(response, status):
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["error"]["code"] == status
    return body["error"]["message"]


def names(api):
    return [e["name"] for e in api.client.get("/environments").json()["environments"]]


def sessions_of(api, env_id):
    from sqlalchemy import func, select

    from fornace.common.db.models import ConfigSession
    with api.store.sessions() as db:
        return db.scalar(select(func.count()).select_from(ConfigSession).where(
            ConfigSession.environment_id == env_id))


# -- origins ---------------------------------------------------------------------------

@pytest.mark.parametrize("header, value", [
    ("Origin", FOREIGN),
    ("Origin", "null"),                         # sandboxed frame, no-referrer policy
    ("Origin", "https://testserver"),           # same host, other scheme
    ("Origin", "http://testserver:8080"),       # same host, other port
    ("Referer", "http://evil.example/attack.html?x=1"),
    ("Referer", "about:blank"),
])
def test_unsafe_requests_from_another_origin_are_403(api, env, header, value):
    env_id, session_id = env
    attempts = [
        ("POST", "/environments", {"json": {"name": "planted"}}),
        ("POST", f"/v1/environments/{env_id}/configure", {}),
        ("PUT", f"/environments/{env_id}", {"json": {"name": "renamed"}}),
        ("POST", f"/environments/{env_id}/services", {
            "json": web_server(), "headers": {"X-Configuration-Session": session_id}}),
        ("POST", f"/environments/{env_id}/actions/plan", {
            "headers": {"X-Configuration-Session": session_id}}),
        ("POST", f"/environments/{env_id}/abandon", {}),
        ("DELETE", f"/environments/{env_id}", {"params": {"abandon": "true"}}),
    ]
    for method, path, kwargs in attempts:
        kwargs.setdefault("headers", {})[header] = value
        response = api.client.request(method, path, **kwargs)
        message = error(response, 403)
        assert "cross-site request refused" in message and "[api] allowed_origins" in message
        assert header in message
    assert "attack.html" not in message        # a Referer's path and query are not echoed
    assert names(api) == ["xo"] and sessions_of(api, env_id) == 1
    assert api.client.get(f"/environments/{env_id}/services",
                          headers={"X-Configuration-Session": session_id}).json() == []
    assert api.published.tasks == []


@pytest.mark.parametrize("headers", [
    {},                                           # the CLI, muranoclient, curl
    {"Origin": OWN},
    {"Origin": "HTTP://TestServer:80"},           # the same origin, spelled otherwise
    {"Referer": OWN + "/docs"},
    {"Origin": OWN, "Referer": FOREIGN + "/"},    # Origin wins when both are sent
])
def test_requests_from_the_api_itself_or_no_page_pass(api, headers):
    response = api.client.post("/environments", json={"name": "ok"}, headers=headers)
    assert response.status_code == 200, response.text


def test_safe_methods_are_not_checked(api, env):
    env_id, _ = env
    response = api.client.get(f"/environments/{env_id}", headers={"Origin": FOREIGN})
    assert response.status_code == 200
    assert api.client.options("/environments", headers={"Origin": FOREIGN}).status_code == 405


def test_allowed_origins_may_send_changes(tmp_path):
    api = make_api(f"sqlite:///{tmp_path / 'allowed.sqlite'}")
    client = TestClient(create_app(api.store, api.client.app.state.auth, jobs=api.jobs,
                                   allowed_origins=["https://UI.example.com:443/",
                                                    "http://127.0.0.1:9000"]))
    for origin in ("https://ui.example.com", "http://127.0.0.1:9000"):
        response = client.post("/environments", json={"name": origin},
                               headers={"Origin": origin})
        assert response.status_code == 200, response.text
    refused = client.post("/environments", json={"name": "x"},
                          headers={"Origin": "http://127.0.0.1:9001"})
    assert "'http://127.0.0.1:9001'" in error(refused, 403)


@pytest.mark.parametrize("value", ["ui.example.com", "https://ui.example.com/app", "null",
                                   "ftp://files.example.com", "http://"])
def test_a_malformed_allowed_origin_is_an_error_naming_the_option(value):
    with pytest.raises(OriginError, match=r"\[api\] allowed_origins.*scheme://host"):
        parse_allowed_origins([value])


def test_origins_are_normalized():
    assert normalize_origin("HTTPS://Example.COM:443/x?y") == "https://example.com"
    assert normalize_origin("http://[::1]:8082") == "http://[::1]:8082"
    assert normalize_origin("http://h:99999") is None
    assert normalize_origin("null") is None


# -- bodies ------------------------------------------------------------------------------

@pytest.mark.parametrize("content_type", ["text/plain", "text/plain; charset=utf-8",
                                          "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=xyz",
                                          "application/octet-stream", "text/json"])
def test_bodies_must_be_json(api, env, content_type):
    env_id, session_id = env
    for path in ("/environments", f"/environments/{env_id}/actions/plan"):
        response = api.client.post(path, content=b'{"name": "planted"}',
                                   headers={"Content-Type": content_type,
                                            "X-Configuration-Session": session_id})
        message = error(response, 415)
        assert content_type.split(";")[0] in message and "application/json" in message
    assert names(api) == ["xo"] and api.published.tasks == []


def test_a_body_without_content_type_is_415(api):
    # as fetch() sends a Blob without a type: a simple request the browser does not preflight
    response = api.client.post("/environments", content=b'{"name": "blob"}')
    assert "content-type" not in response.request.headers
    assert "no Content-Type" in error(response, 415)
    assert names(api) == []


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data"])
def test_form_types_are_refused_even_without_a_body(api, env, content_type):
    env_id, _ = env
    response = api.client.post(f"/environments/{env_id}/configure",
                               headers={"Content-Type": content_type})
    assert content_type in error(response, 415)
    assert sessions_of(api, env_id) == 1


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=UTF-8",
                                          "application/vnd.api+json", "Application/JSON"])
def test_json_types_pass(api, content_type):
    response = api.client.post("/environments", content=b'{"name": "ok"}',
                               headers={"Content-Type": content_type})
    assert response.status_code == 200, response.text


def test_empty_bodies_pass_with_json_or_no_type(api, env):
    """muranoclient sends Content-Type: application/json on its empty POSTs
    (configure, deploy); the CLI's client sends none."""
    env_id, _ = env
    for headers in ({"Content-Type": "application/json"}, {}):
        response = api.client.post(f"/environments/{env_id}/configure", headers=headers)
        assert response.status_code == 200, response.text


@pytest.mark.parametrize("content_type", [";;;", "", "application/json; charset=\"utf-8",
                                          "json", "/json", "application/json; charset",
                                          "application/json; =x"])
def test_a_malformed_content_type_is_the_json_400(api, content_type):
    response = api.client.post("/environments", content=b'{"name": "x"}',
                               headers={"Content-Type": content_type})
    assert "malformed Content-Type" in error(response, 400)
    assert names(api) == []


def test_two_content_types_are_400(api):
    response = api.client.post("/environments", content=b'{"name": "x"}',
                               headers=[("Content-Type", "application/json"),
                                        ("Content-Type", "text/plain")])
    assert "more than one Content-Type" in error(response, 400)


def test_the_dashboard_keeps_its_forms_and_its_own_csrf_check(api):
    page = api.client.get("/dashboard/login")
    assert page.status_code == 200
    token = page_token(page.text)
    form = {"csrf_token": token, "name": "from-the-form"}
    same = api.client.post("/dashboard/environments", data=form, follow_redirects=False,
                           headers={"Origin": OWN})
    assert same.status_code == 303, same.text
    foreign = api.client.post("/dashboard/environments", data=form, follow_redirects=False,
                              headers={"Origin": FOREIGN})
    assert foreign.status_code == 403 and "another site" in foreign.text
    assert names(api) == ["from-the-form"]


# -- over HTTP: uvicorn's own 400, the CLI's client ---------------------------------------------

def raw_request(url: str, request: bytes) -> tuple[bytes, bytes]:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body


@pytest.mark.parametrize("content_type", [b"application/json\x01", b"\x00", b"text/\x7f"])
@pytest.mark.parametrize("http", ["auto", "h11"])
def test_an_unparseable_header_gets_the_json_400_from_the_server(api, content_type, http):
    with serving(api.client.app, JsonH11Protocol if http == "h11" else None) as url:
        head, body = raw_request(url, b"POST /environments HTTP/1.1\r\nHost: localhost\r\n"
                                      b"Connection: close\r\n"
                                      b"Content-Type: " + content_type + b"\r\n"
                                      b"Content-Length: 2\r\n\r\n{}")
    assert head.startswith(b"HTTP/1.1 400 ")
    assert b"content-type: application/json" in head.lower()
    error_body = json.loads(body)["error"]
    # httptools refuses all three before the app; h11 lets \x01 and \x7f through to it
    assert error_body["code"] == 400
    assert ("could not be parsed" in error_body["message"]
            or "malformed Content-Type" in error_body["message"]), error_body
    assert names(api) == []


def test_the_cli_client_keeps_working(api):
    with serving(api.client.app) as url:
        client = ApiClient(url, tenant="t1")
        env = client.post("/environments", {"name": "cli"})
        session = client.post(f"/environments/{env['id']}/configure")["id"]   # no body
        service = client.post(f"/environments/{env['id']}/services", web_server(), session)
        assert service["adminPassword"] == "***"
        plan = client.post(f"/environments/{env['id']}/actions/plan", session=session)
        assert plan["action"] == "plan"
        with pytest.raises(ClientError, match=r"is busy: job \w+ \(plan\) running") as busy:
            client.post(f"/environments/{env['id']}/sessions/{session}/deploy")
        assert busy.value.status == 409 and busy.value.error["job"]["id"] == plan["id"]
        client.post(f"/environments/{env['id']}/abandon")
        client.post(f"/environments/{env['id']}/sessions/{session}/deploy")
        assert client.get(f"/environments/{env['id']}")["status"] == "deploying"
        client.delete(f"/environments/{env['id']}?abandon=true")
        assert client.get("/environments") == {"environments": []}
