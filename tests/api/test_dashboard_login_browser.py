"""The keystone login in a real browser (Debian's chromium, driven by Playwright),
against the real Keystone of keystone-up.

Alice opens a page of the dashboard, lands on the login form, is refused with a
wrong password (the names she typed kept), logs in through the form and comes
back to the page she asked for, with her user and project in the header; no
script of the page can read the token.  Her logout revokes the token in
Keystone; after a new login, a token revoked behind her back makes the next
page say the session expired.  Screenshots of each step are saved in
``$FORNACE_SCREENSHOTS`` (default: a folder of the test's tmp dir).
"""
from __future__ import annotations

import os
from pathlib import Path

import identitykit
from browserkit import chromium
from serving import serving
from test_dashboard_login import dashboard_app, keystone_auth, keystone_knows, revoke

STEP_TIMEOUT_MS = 30_000


def test_alice_logs_in_and_out_through_the_form(tmp_path):
    from playwright.sync_api import expect

    shots = Path(os.environ.get("FORNACE_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    auth = keystone_auth()
    alice = identitykit.login("alice")
    with serving(dashboard_app(tmp_path, auth)) as url, chromium() as browser:
        api = browser.new_context(base_url=url).request
        made = api.post("/environments", data={"name": "alice-web"},
                        headers={"X-Auth-Token": alice.token})
        assert made.ok, made.text()
        context = browser.new_context(viewport={"width": 1200, "height": 720})
        page = context.new_page()
        page.set_default_timeout(STEP_TIMEOUT_MS)

        page.goto(f"{url}/dashboard/deployments")
        expect(page).to_have_url(f"{url}/dashboard/login?next=/dashboard/deployments")
        expect(page.locator("#in-user-domain")).to_be_hidden()   # under "Domains"
        page.screenshot(path=str(shots / "login-1-form.png"), full_page=True)

        fill(page, "alice", "not-her-password", "demo-a")
        expect(page.locator("[role=alert]")).to_have_text("Wrong user name, password or project.")
        expect(page.locator("#in-username")).to_have_value("alice")
        expect(page.locator("#in-project")).to_have_value("demo-a")
        expect(page.locator("#in-password")).to_have_value("")
        page.screenshot(path=str(shots / "login-2-refused.png"), full_page=True)

        password_again(page, f"{url}/dashboard/deployments")
        who = page.locator(".topbar .who")
        expect(who).to_contain_text("user alice · project demo-a")
        token = cookie(context, "fornace_token")
        assert keystone_knows(token) == 200
        assert token not in page.evaluate("document.cookie")      # HttpOnly
        page.click(".sidebar >> text=Environments")
        expect(page.locator("main")).to_contain_text("alice-web")
        page.screenshot(path=str(shots / "login-3-logged-in.png"), full_page=True)
        page.screenshot(path=str(shots / "login-4-header.png"),
                        clip={"x": 0, "y": 0, "width": 1200, "height": 48})

        who.locator("button:has-text('Log out')").click()
        expect(page.locator(".flash")).to_have_text("You are logged out.")
        assert page.url.startswith(f"{url}/dashboard/login")
        assert keystone_knows(token) == 404
        assert cookie(context, "fornace_token") is None
        page.screenshot(path=str(shots / "login-5-logged-out.png"), full_page=True)

        fill(page, "alice", "alice-secret", "demo-a")
        expect(who).to_contain_text("user alice")
        revoke(auth, cookie(context, "fornace_token"))
        page.goto(f"{url}/dashboard/deployments")
        expect(page.locator(".flash")).to_have_text("Your session has expired: log in again.")
        expect(page.locator("#in-username")).to_have_value("alice")
        page.screenshot(path=str(shots / "login-6-expired.png"), full_page=True)
        password_again(page, f"{url}/dashboard/deployments")
    print(f"\nlogin screenshots: {shots}")


def fill(page, username: str, password: str, project: str) -> None:
    page.fill("#in-username", username)
    page.fill("#in-password", password)
    page.fill("#in-project", project)
    page.click("button:has-text('Log in')")


def password_again(page, lands_on: str) -> None:
    """Log in with the names the form kept: the password only."""
    from playwright.sync_api import expect
    page.fill("#in-password", "alice-secret")
    page.click("button:has-text('Log in')")
    expect(page).to_have_url(lands_on)


def cookie(context, name: str) -> str | None:
    return next((c["value"] for c in context.cookies() if c["name"] == name), None)
