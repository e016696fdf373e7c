"""The dashboard's pages of an environment's package versions: listed with the
newest, the plan of a move with its diff, the move confirmed by a form post,
unpinning; a reader sees them without the buttons."""
from __future__ import annotations

import re

from test_dashboard import OWN, Browser
from browserkit import chromium, log_in, overflow
from serving import serving
from test_dashboard_packages import DASH, api, packages_app, shots, user  # noqa: F401
from fornace.api.auth import NoAuth
from test_pins import greet


def test_pin_plan_move_and_unpin_from_the_dashboard(api):
    mia = user(api, "mia")
    first = mia.client.post("/packages", content=greet("1.0.0", "one"),
                            headers={"Content-Type": "application/zip", "X-Auth-Token": "mia"})
    assert first.status_code == 201, first.text
    env = mia.client.post("/environments", json={"name": "web"},
                          headers={"X-Auth-Token": "mia"}).json()
    page = mia.get(f"/environments/{env['id']}/packages")
    assert "uses no workflow package" in page and "<option>greet</option>" in page

    plan = mia.get(f"/environments/{env['id']}/packages/plan?name=greet")
    assert "Use greet 1.0.0" in plan and "+ workflows/Greet.xml" in plan
    assert 'id="reconfigure-note"' not in plan   # a first use: nothing was configured by it
    moved = mia.client.post(f"{DASH}/environments/{env['id']}/packages/greet",
                            data={"csrf_token": mia.token(), "version": "1.0.0"},
                            follow_redirects=False, headers=OWN)
    assert moved.status_code == 303, moved.text
    page = mia.get(f"/environments/{env['id']}/packages")
    assert 'data-pin="greet"' in page and "now uses greet 1.0.0" in page

    mia.client.post("/packages", content=greet("1.1.0", "two"),
                    headers={"Content-Type": "application/zip", "X-Auth-Token": "mia"})
    page = mia.get(f"/environments/{env['id']}/packages")
    assert "Move to 1.1.0" in page
    plan = mia.get(f"/environments/{env['id']}/packages/greet/plan?version=1.1.0")
    assert "Move greet from 1.0.0 to 1.1.0" in plan
    assert 'id="reconfigure-note"' in plan       # a file changed: its units configure again
    assert re.search(r'<span class="del">-\s+&lt;parameter name=&#34;text&#34;&gt;one', plan), plan
    assert re.search(r'<span class="add">\+\s+&lt;parameter name=&#34;text&#34;&gt;two', plan)

    # a reader sees the versions, not the buttons; a post of theirs is refused
    rita = user(api, "rita")
    page = rita.get(f"/environments/{env['id']}/packages")
    assert 'data-pin="greet"' in page and "Unpin" not in page and "Move to" not in page
    refused = rita.client.post(f"{DASH}/environments/{env['id']}/packages/greet/unpin",
                               data={"csrf_token": rita.token()}, follow_redirects=False,
                               headers=OWN)
    assert refused.status_code == 403

    gone = mia.client.post(f"{DASH}/environments/{env['id']}/packages/greet/unpin",
                           data={"csrf_token": mia.token()}, follow_redirects=False, headers=OWN)
    assert gone.status_code == 303
    assert "uses no workflow package" in mia.get(f"/environments/{env['id']}/packages")


def test_an_unknown_package_is_a_message_not_a_crash(api):
    mia = user(api, "mia")
    env = mia.client.post("/environments", json={"name": "web"},
                          headers={"X-Auth-Token": "mia"}).json()
    answer = mia.client.post(f"{DASH}/environments/{env['id']}/packages/nothing",
                             data={"csrf_token": mia.token()}, follow_redirects=True, headers=OWN)
    assert answer.status_code == 200 and "no package &#39;nothing&#39;" in answer.text
    assert isinstance(mia, Browser)


def test_the_plan_of_a_move_in_a_browser(tmp_path, shots):
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)
    api = packages_app(f"sqlite:///{tmp_path / 'browser.sqlite'}", NoAuth("t1", "u1"))
    headers = {"Content-Type": "application/zip", "X-Tenant-Id": "pin-tenant"}
    for version, text in (("1.0.0", "one"), ("1.1.0", "two")):
        assert api.client.post("/packages", content=greet(version, text),
                               headers=headers).status_code == 201
    env = api.client.post("/environments", json={"name": "shop"},
                          headers={"X-Tenant-Id": "pin-tenant"}).json()
    assert api.client.put(f"/environments/{env['id']}/packages/greet",
                          json={"version": "1.0.0"},
                          headers={"X-Tenant-Id": "pin-tenant"}).status_code == 200
    with chromium() as browser, serving(api.client.app) as url:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        dashboard = url + "/dashboard"
        log_in(page, dashboard, "pin-tenant", "alice")
        page.goto(f"{dashboard}/environments/{env['id']}")
        page.click("#env-packages")
        expect(page.locator("tr[data-pin='greet']")).to_contain_text("1.1.0")
        page.screenshot(path=str(shots / "environment-packages.png"), full_page=True)
        page.click("a:has-text('Move to 1.1.0')")
        expect(page.locator("pre.diff .add")).to_contain_text(["two"])
        assert overflow(page) == []
        page.screenshot(path=str(shots / "package-move-plan.png"), full_page=True)
        page.click("#confirm-move")
        expect(page.locator(".flash")).to_contain_text("now uses greet 1.1.0")
