"""The dashboard's forms against cross-site forgery: a token signed by the
server and bound to the session and the login, and the Origin (or Referer)
of every form POST -- the login's too -- checked.

The attacker of these tests controls a page that can set cookies for the
dashboard's host (another port of the same host, a sibling subdomain), so
cookies prove nothing by themselves.
"""
from __future__ import annotations

import os
import stat

import pytest
from fastapi.testclient import TestClient

from fornace.api.dashboard.formsecret import FILE_NAME, FormSecretError, form_secret
from test_dashboard import DASH, OWN, page_token
from test_dashboard import api, browser  # noqa: F401 -- the fixtures

CHOSEN = "A" * 43   # a value the attacker picks, well formed for any cookie of the forms


def names(api) -> list[str]:
    return [e["name"] for e in api.client.get("/environments").json()["environments"]]


def post(client: TestClient, path: str, data: dict[str, str], **headers: str):
    return client.post(DASH + path, data=data, headers=headers, follow_redirects=False)


# -- the token ------------------------------------------------------------------------------

def test_a_token_the_attacker_put_in_a_cookie_is_refused(api):
    """Double submit would take any value present both in a cookie and in the
    form; the attacker can set the cookie, so neither of these passes."""
    client = api.client
    for cookie in ("fornace_csrf", "fornace_session"):
        client.cookies.set(cookie, CHOSEN, path="/dashboard")
    forged = post(client, "/environments", {"name": "forged", "csrf_token": CHOSEN}, **OWN)
    assert forged.status_code == 403, forged.text
    assert "reload the page" in forged.text
    assert names(api) == []


def test_the_token_of_the_page_works_and_is_bound_to_the_login(api, browser):
    token = browser.token()
    assert browser.post("/environments", {"name": "mine"}).status_code == 303
    # the same session id, another login (cookies the attacker can toss): refused
    api.client.cookies.set("fornace_tenant", "t-other", path="/dashboard")
    api.client.cookies.set("fornace_user", "u-other", path="/dashboard")
    stale = post(api.client, "/environments", {"name": "as-other", "csrf_token": token}, **OWN)
    assert stale.status_code == 403
    assert names(api) == ["mine"]


def test_another_secret_refuses_the_token(api, tmp_path):
    """A token is the server's signature: an app with another secret (another
    installation) does not take it; one with the same secret (another worker) does."""
    from fornace.api.app import create_app

    page = api.client.get(DASH + "/login")
    token, session = page_token(page.text), api.client.cookies.get("fornace_session")
    app = api.client.app
    for same in (True, False):
        other = create_app(api.store, app.state.auth, jobs=api.jobs,
                           form_secret=_dashboard(app).state.form_secret if same
                           else b"another secret of 32 bytes......")
        client = TestClient(other, raise_server_exceptions=False)
        client.cookies.set("fornace_session", session, path="/dashboard")
        answer = post(client, "/environments", {"name": f"same-{same}", "csrf_token": token},
                      **OWN)
        assert answer.status_code == (303 if same else 403), answer.text
    assert names(api) == ["same-True"]


def _dashboard(app):
    return next(route.app for route in app.routes if getattr(route, "path", "") == "/dashboard")


def test_the_session_id_is_new_after_a_login_and_gone_after_a_logout(api, browser):
    page = api.client.get(DASH + "/login")
    before, token = api.client.cookies.get("fornace_session"), page_token(page.text)
    login = browser.post("/login", {"tenant": "t1", "user": "u1", "next": DASH + "/"})
    assert login.status_code == 303, login.text
    after = api.client.cookies.get("fornace_session")
    assert after and after != before
    # the token of the login page does not outlive the login
    old = post(api.client, "/environments", {"name": "old", "csrf_token": token}, **OWN)
    assert old.status_code == 403
    out = browser.post("/logout")
    assert out.status_code == 303
    assert "fornace_session=" in out.headers["set-cookie"] and "Max-Age=0" in \
        [c for c in out.headers.get_list("set-cookie") if "fornace_session=" in c][0]
    assert names(api) == []


# -- where the form comes from ------------------------------------------------------------

@pytest.mark.parametrize("headers", [{"Origin": "null"}, {"Origin": "http://evil.example"},
                                     {"Origin": "http://testserver:8443"},
                                     {"Referer": "http://evil.example/page"},
                                     {"Referer": "about:blank"}, {}],
                         ids=["null", "foreign", "other-port", "foreign-referer",
                              "opaque-referer", "neither"])
def test_a_form_from_elsewhere_is_refused_even_with_the_right_token(api, browser, headers):
    token = browser.token()
    refused = post(api.client, "/environments", {"name": "x", "csrf_token": token}, **headers)
    assert refused.status_code == 403, refused.text
    assert names(api) == []


def test_a_referer_of_the_dashboard_stands_for_a_missing_origin(api, browser):
    token = browser.token()
    fine = post(api.client, "/environments", {"name": "x", "csrf_token": token},
                Referer="http://testserver/dashboard/")
    assert fine.status_code == 303, fine.text


@pytest.mark.parametrize("origin", ["null", "http://evil.example"])
def test_no_login_csrf(api, browser, origin):
    """Another site cannot log the browser in as someone else."""
    token = browser.token()
    forged = post(api.client, "/login", {"tenant": "attacker", "user": "attacker",
                                         "next": DASH + "/", "csrf_token": token},
                  Origin=origin)
    assert forged.status_code == 403
    assert "fornace_tenant" not in forged.headers.get("set-cookie", "")
    assert api.client.cookies.get("fornace_tenant") is None


@pytest.mark.parametrize("path", ["/packages/new", "/environments/x/delete",
                                  "/environments/x/packages/greet",
                                  "/environments/x/packages/greet/unpin", "/logout"])
def test_every_form_post_checks_the_origin(api, browser, path):
    token = browser.token()
    files = {"package": ("hello.zip", b"PK", "application/zip")} if path.endswith("/new") \
        else None
    refused = api.client.post(DASH + path, data={"csrf_token": token}, files=files,
                              headers={"Origin": "null"}, follow_redirects=False)
    assert refused.status_code == 403, (path, refused.status_code, refused.text)


# -- the secret -------------------------------------------------------------------------------

def test_the_secret_is_made_once_and_kept_for_its_owner_only(tmp_path):
    first = form_secret(None, tmp_path / "state")
    assert len(first) >= 32
    kept = tmp_path / "state" / FILE_NAME
    assert stat.S_IMODE(os.stat(kept).st_mode) == 0o600
    assert form_secret(None, tmp_path / "state") == first
    assert form_secret("  a configured secret value  ", tmp_path / "state") == \
        b"a configured secret value"
    with pytest.raises(FormSecretError, match="too short"):
        form_secret("short", tmp_path)
    kept.write_text("x")
    with pytest.raises(FormSecretError, match="too short"):
        form_secret(None, tmp_path / "state")


def test_the_api_service_signs_with_the_configured_or_kept_secret(tmp_path, caplog):
    from fornace.api.server import ApiService
    from fornace.cli.main import build_conf

    conf = build_conf()
    conf(["api"], default_config_files=[])
    conf.set_override("state_dir", str(tmp_path), group="api")
    conf.set_override("dashboard_secret", "the-operator-s-secret-value", group="api")
    service = ApiService(conf, f"sqlite:///{tmp_path / 'secret.sqlite'}")
    try:
        assert _dashboard(service.app).state.form_secret == b"the-operator-s-secret-value"
        assert not (tmp_path / FILE_NAME).exists()
        assert "the-operator-s-secret-value" not in caplog.text
    finally:
        service.stop()
    conf.clear_override("dashboard_secret", group="api")
    service = ApiService(conf, f"sqlite:///{tmp_path / 'secret.sqlite'}")
    try:
        assert _dashboard(service.app).state.form_secret == \
            (tmp_path / FILE_NAME).read_bytes().strip()
    finally:
        service.stop()
