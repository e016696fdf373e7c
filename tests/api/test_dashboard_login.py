"""The dashboard's login in keystone mode, against the real Keystone of keystone-up.

A user logs in with a user name, password and project; Keystone's token goes
into an HttpOnly cookie that lives as long as the token and never shows in a
page.  A refused login says so and keeps what was typed (not the password);
a logout revokes the token in Keystone; a session whose token Keystone
refuses (revoked, expired) asks to log in again saying the session expired,
and the login goes back to the page asked for; an unreachable Keystone is an
error on the login page, not a crash.
"""
from __future__ import annotations

import html
import re
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

import identitykit
from apikit import Published
from fornace.api.app import create_app
from fornace.api.auth import KeystoneAuth
from fornace.api.stores.jobs import Jobs
from fornace.api.stores.store import Store
from fornace.common.db.engine import make_engine, session_factory, upgrade
from fornace.common.identity import expiry
from services import keystone_url
from test_dashboard import DASH, OWN, Browser, create_env
from waiting import wait_for

ALICE = {"username": "alice", "password": "alice-secret", "project": "demo-a"}
EXPIRED = "Your session has expired: log in again."


keystone_auth = identitykit.keystone_auth


def dashboard_app(tmp_path, auth: KeystoneAuth) -> Any:
    url = f"sqlite:///{tmp_path / 'login.sqlite'}"
    upgrade(url)
    store = Store(session_factory(make_engine(url)), Published())
    return create_app(store, auth, jobs=Jobs(store))


@pytest.fixture
def auth():
    return keystone_auth()


@pytest.fixture
def app(tmp_path, auth):
    return dashboard_app(tmp_path, auth)


@pytest.fixture
def browser(app):
    return Browser(TestClient(app, raise_server_exceptions=False))


def log_in(browser: Browser, next_page: str = "", **fields: str) -> Any:
    return browser.post("/login", {**ALICE, "next": next_page, **fields})


def set_cookies(response: Any) -> dict[str, str]:
    """The Set-Cookie headers of a response, by cookie name."""
    return {header.split("=", 1)[0]: header for header in response.headers.get_list("set-cookie")}


def keystone_knows(token: str) -> int:
    """What Keystone answers (HTTP status) when asked to validate ``token``."""
    return identitykit.identity(identitykit.admin(), "GET", "/auth/tokens",
                                headers={"X-Subject-Token": token}).status_code


def revoke(auth: KeystoneAuth, token: str) -> None:
    """Revoke ``token`` behind the dashboard's back (as the cloud admin), and let
    the authenticator's cache go (it trusts a token up to ``token_cache_time``)."""
    revoked = identitykit.identity(identitykit.admin(), "DELETE", "/auth/tokens",
                                   headers={"X-Subject-Token": token})
    assert revoked.status_code == 204, revoked.text
    auth.forget(token)


def flash_of(page: str) -> str | None:
    found = re.search(r'<div class="flash flash-\w+" role="status"[^>]*>(.*?)</div>', page, re.S)
    return html.unescape(found.group(1).strip()) if found else None


def field_value(page: str, name: str) -> str | None:
    found = re.search(rf'<input [^>]*name="{name}"[^>]*>', page, re.S)
    if not found:
        return None
    value = re.search(r'value="([^"]*)"', found.group(0))
    return html.unescape(value.group(1)) if value else None


def test_alice_logs_in_with_her_password_and_sees_her_environments(app, browser):
    alice, bob = identitykit.login("alice"), identitykit.login("bob")
    client = browser.client
    for who, name in ((alice, "alice-env"), (bob, "bob-env")):
        made = client.post("/environments", json={"name": name},
                           headers={"X-Auth-Token": who.token})
        assert made.status_code == 200, made.text
    first = client.get(f"{DASH}/deployments", follow_redirects=False)
    assert first.status_code == 303
    assert first.headers["location"] == f"{DASH}/login?next={DASH}/deployments"
    page = browser.get("/login?next=/dashboard/deployments")
    assert 'name="username"' in page and 'name="password"' in page and 'name="project"' in page
    assert field_value(page, "user_domain") == "Default"
    assert field_value(page, "project_domain") == "Default"
    assert 'name="token"' not in page and 'name="tenant"' not in page
    assert flash_of(page) is None            # never logged in: a plain login page

    good = log_in(browser, f"{DASH}/deployments")
    assert good.status_code == 303 and good.headers["location"] == f"{DASH}/deployments"
    cookie = set_cookies(good)["fornace_token"]
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie
    token = client.cookies.get("fornace_token")
    assert keystone_knows(token) == 200

    listing = browser.get("/")
    assert "alice-env" in listing and "bob-env" not in listing
    assert re.search(r"user <b [^>]*>alice</b>\s*· project <b [^>]*>demo-a</b>", listing)
    assert "Log out" in listing
    env_id = create_env(browser, "from-the-dashboard")
    made = client.get(f"/environments/{env_id}", headers={"X-Auth-Token": alice.token})
    assert made.json()["tenant_id"] == alice.project_id
    browser.get(f"/environments/{env_id}")
    assert not any(token in page or ALICE["password"] in page for page in browser.pages)
    # the JSON API still wants its header: the cookie is the dashboard's only
    assert client.get("/environments").status_code == 401


def test_the_cookie_lives_as_long_as_the_token(browser):
    response = log_in(browser)
    token = browser.client.cookies.get("fornace_token")
    body = identitykit.identity(identitykit.admin(), "GET", "/auth/tokens",
                                headers={"X-Subject-Token": token}).json()["token"]
    max_age = int(re.search(r"Max-Age=(\d+)", set_cookies(response)["fornace_token"]).group(1))
    assert abs(max_age - (expiry(body) - time.time())) < 30
    # who logged in stays for this browser session only (no Max-Age), never a secret
    login_cookie = set_cookies(response)["fornace_login"]
    assert "Max-Age" not in login_cookie and "HttpOnly" in login_cookie
    assert "alice-secret" not in login_cookie and token not in login_cookie


@pytest.mark.parametrize("wrong", [{"password": "not-her-password"}, {"project": "demo-b"},
                                   {"username": "nobody"}, {"user_domain": "Elsewhere"}])
def test_a_refused_login_says_so_and_keeps_the_names_not_the_password(browser, wrong):
    refused = log_in(browser, f"{DASH}/deployments", **wrong)
    assert refused.status_code == 401
    assert "Wrong user name, password or project." in refused.text
    assert "fornace_token" not in set_cookies(refused)
    assert "fornace_token" not in browser.client.cookies
    typed = {**ALICE, **wrong}
    assert field_value(refused.text, "username") == typed["username"]
    assert field_value(refused.text, "project") == typed["project"]
    assert field_value(refused.text, "password") is None
    assert typed["password"] not in refused.text
    assert field_value(refused.text, "next") == f"{DASH}/deployments"
    if "user_domain" in wrong:    # another domain: the domain fields are shown open
        assert field_value(refused.text, "user_domain") == "Elsewhere"
        assert re.search(r'<details class="domains"\s+open>', refused.text)


def test_every_field_is_needed(browser):
    empty = log_in(browser, password="")
    assert empty.status_code == 400 and "are required" in empty.text
    assert "fornace_token" not in set_cookies(empty)


def test_logout_revokes_the_token_and_the_next_page_asks_to_log_in(auth, browser):
    log_in(browser)
    token = browser.client.cookies.get("fornace_token")
    assert browser.get("/")
    # without the page's form token, no logout (another site cannot log you out)
    forged = browser.client.post(f"{DASH}/logout", data={"csrf_token": "x" * 40},
                                 follow_redirects=False, headers=OWN)
    assert forged.status_code == 403 and keystone_knows(token) == 200

    out = browser.post("/logout")
    assert out.status_code == 303 and out.headers["location"] == f"{DASH}/login"
    gone = set_cookies(out)
    assert all("Max-Age=0" in gone[name] for name in ("fornace_token", "fornace_login"))
    assert keystone_knows(token) == 404
    assert token not in auth._cache
    page = browser.follow(out)
    assert flash_of(page) == "You are logged out."
    assert field_value(page, "username") == ""       # nobody is remembered
    again = browser.client.get(f"{DASH}/", follow_redirects=False)
    assert again.status_code == 303 and again.headers["location"] == f"{DASH}/login?next=/dashboard/"
    assert flash_of(browser.get("/login?next=/dashboard/")) is None   # not "expired": logged out
    # the old cookie, sent again (a copy of it), is refused: the token is revoked
    browser.client.cookies.set("fornace_token", token, path="/dashboard")
    copied = browser.client.get(f"{DASH}/", follow_redirects=False)
    assert copied.status_code == 303


def test_a_revoked_token_is_an_expired_session_and_the_login_goes_back(auth, browser):
    log_in(browser)
    revoke(auth, browser.client.cookies.get("fornace_token"))
    live = browser.client.get(f"{DASH}/live")
    assert live.status_code == 401 and live.json()["error"]["code"] == 401

    asked = browser.client.get(f"{DASH}/deployments", follow_redirects=False)
    assert asked.status_code == 303
    assert asked.headers["location"] == f"{DASH}/login?next={DASH}/deployments"
    assert "Max-Age=0" in set_cookies(asked)["fornace_token"]
    page = browser.get(f"/login?next={DASH}/deployments")
    assert flash_of(page) == EXPIRED
    assert field_value(page, "username") == "alice" and field_value(page, "project") == "demo-a"
    back = browser.post("/login", {"password": ALICE["password"], "username": "alice",
                                   "project": "demo-a", "next": f"{DASH}/deployments"})
    assert back.status_code == 303 and back.headers["location"] == f"{DASH}/deployments"
    assert "Deployments" in browser.follow(back)


def test_a_token_that_expires_ends_the_session(tmp_path):
    """A Keystone of the test's own whose tokens live 10 s: the cookie goes with
    the token, and the next page says the session expired."""
    with identitykit.own_keystone(tmp_path, expiration=10, with_heat=False) as url:
        browser = Browser(TestClient(dashboard_app(tmp_path, keystone_auth(url)),
                                     raise_server_exceptions=False))
        response = log_in(browser)
        max_age = int(re.search(r"Max-Age=(\d+)",
                                set_cookies(response)["fornace_token"]).group(1))
        assert 0 < max_age <= 10
        assert "alice" in browser.get("/")

        def expired() -> Any:
            asked = browser.client.get(f"{DASH}/", follow_redirects=False)
            return asked if asked.status_code == 303 else None
        asked = wait_for(expired, "the session to end with its token", timeout=60)
        assert asked.headers["location"] == f"{DASH}/login?next=/dashboard/"
        assert flash_of(browser.get("/login?next=/dashboard/")) == EXPIRED


def test_an_unreachable_keystone_is_a_clear_error(tmp_path):
    keystone_url()
    browser = Browser(TestClient(dashboard_app(tmp_path, keystone_auth("http://127.0.0.1:9/v3")),
                                 raise_server_exceptions=False))
    refused = log_in(browser)
    assert refused.status_code == 503
    assert "Keystone cannot check the login now" in refused.text
    assert "try again in a moment" in refused.text
    assert field_value(refused.text, "username") == "alice"
    assert "alice-secret" not in refused.text
    # a session already there: an error page, the cookie kept for when Keystone is back
    browser.client.cookies.set("fornace_token", "some-token", path="/dashboard")
    page = browser.client.get(f"{DASH}/", follow_redirects=False)
    assert page.status_code == 503 and "Keystone cannot check your login now" in page.text
    assert "fornace_token" not in set_cookies(page) and "some-token" not in page.text
    out = browser.post("/logout")   # the cookie goes even so, with a warning
    assert out.status_code == 303 and "Max-Age=0" in set_cookies(out)["fornace_token"]
    assert "could not revoke your token" in flash_of(browser.follow(out))
