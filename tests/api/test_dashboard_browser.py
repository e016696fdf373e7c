"""The web dashboard in a real browser: Debian's chromium driven by Playwright.

A OneBox (API + conductor + local cloud, folder broker and SQLite) serves the
dashboard; the browser does what a user would: logs in (noauth), creates an
environment, adds a Linux web server with a port out of range, sees the error
at the field, fixes it, deploys on the local cloud, watches the page turn
ready without reloading, opens the job and its task logs, runs the check
action and deletes the environment.  Screenshots of each step are saved in
``$FORNACE_SCREENSHOTS`` (default: a folder of the test's tmp dir).

Without chromium (``/usr/bin/chromium``, or ``$FORNACE_CHROMIUM``) or the
playwright package the test skips -- a failure under FORNACE_REQUIRE_SERVICES=1.
"""
from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import pytest

from apikit import free_port
from browserkit import chromium
from localkit import running_onebox

DEPLOY_TIMEOUT_MS = 240_000
STEP_TIMEOUT_MS = 30_000


class Screens:
    """Numbered full-page screenshots in one folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.count = 0
        folder.mkdir(parents=True, exist_ok=True)

    def take(self, page, name: str) -> Path:
        self.count += 1
        path = self.folder / f"{self.count:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def screens(tmp_path):
    folder = Path(os.environ.get("FORNACE_SCREENSHOTS") or tmp_path / "screenshots")
    print(f"\ndashboard screenshots: {folder}")
    yield Screens(folder)
    print(f"\ndashboard screenshots saved in {folder}")


@pytest.fixture
def playwright_browser():
    with chromium() as browser:
        yield browser


@pytest.fixture
def box(tmp_path):
    yield from running_onebox(tmp_path / "state", max_environments=1)


def test_a_user_deploys_checks_and_deletes_an_environment_in_the_browser(
        playwright_browser, box, screens):
    from playwright.sync_api import expect

    expect.set_options(timeout=STEP_TIMEOUT_MS)
    page = playwright_browser.new_page(viewport={"width": 1366, "height": 900})
    dashboard = box.url + "/dashboard"

    # log in (noauth: the tenant and user the pages act as)
    page.goto(dashboard + "/login")
    page.fill("#in-tenant", "browser-tenant")
    page.fill("#in-user", "alice")
    screens.take(page, "login")
    page.click("button:has-text('Log in')")
    expect(page.locator(".topbar .who")).to_contain_text("browser-tenant")

    # create an environment
    page.fill("#in-env-name", "web-demo")
    page.click("button:has-text('Create environment')")
    expect(page.locator(".flash-ok")).to_contain_text("Environment web-demo created")
    expect(page.locator("h1")).to_contain_text("web-demo")
    env_url = page.url

    # add a Linux web server: a port out of range is shown at the field
    page.click("a:has-text('Add service')")
    page.click(".card[data-type=linuxWebServer]")
    port = free_port()
    page.fill("#in-name", "demo-site")
    page.fill("#in-unitNamingPattern", "web#")
    page.fill("#in-osImage", '{"name": "local", "type": "linux"}')
    page.fill("#in-port", "70000")
    page.fill("#in-units", "2")
    page.click("#save-service")
    port_error = page.locator("#field-port .error")
    expect(port_error).to_contain_text("between 1 and 65535")
    expect(page.locator("#in-name")).to_have_value("demo-site")
    screens.take(page, "service-form-error")
    page.fill("#in-port", str(port))
    page.click("#save-service")
    expect(page.locator(".flash-ok")).to_contain_text("demo-site saved in the session")
    expect(page.locator("#session .changes")).to_contain_text("added: demo-site")
    screens.take(page, "session-pending")

    # deploy, and watch the page become ready without a reload
    page.click("#deploy-button")
    expect(page.locator("#env-status")).to_contain_text("deploying")
    page.evaluate("window.fornaceNoReload = true")
    screens.take(page, "deploying")
    expect(page.locator("#env-status")).to_contain_text("ready", timeout=DEPLOY_TIMEOUT_MS)
    assert page.evaluate("window.fornaceNoReload") is True, "the page was reloaded"
    units = page.locator("#services .unit-row")
    expect(units).to_have_count(2)
    expect(page.locator("#services")).to_contain_text("web1")
    expect(page.locator("#services")).to_contain_text("web2")
    expect(page.locator("svg.topology .unit")).to_have_count(2)
    screens.take(page, "ready")

    # every unit serves the site
    for row in range(2):
        address = units.nth(row).locator("td").nth(2).inner_text().strip()
        with urllib.request.urlopen(f"http://{address}:{port}/", timeout=10) as site:
            assert "demo-site" in site.read().decode()

    # the job's tasks and their logs
    page.click("#jobs a:has-text('deploy')")
    expect(page.locator("#job-state")).to_contain_text("success")
    expect(page.locator("#tasks .task").first).to_be_visible()
    expect(page.locator("pre.log").first).to_be_attached()
    assert page.locator("#tasks .task").count() >= 2
    expect(page.locator("#reports")).to_contain_text("Service demo-site is ready")
    screens.take(page, "deploy-job-logs")

    # run the check action; its job page follows it live
    page.goto(env_url)
    page.click("a:has-text('Run an action')")
    page.click(".card[data-action=check]")
    page.click("#run-action")
    expect(page.locator(".flash-ok")).to_contain_text("Job check started")
    expect(page.locator("#job-state")).to_contain_text("success", timeout=DEPLOY_TIMEOUT_MS)
    expect(page.locator("#tasks .task").first).to_be_visible()
    screens.take(page, "check-job")

    # delete the environment: it disappears from the list, its instances are gone
    page.goto(env_url)
    page.click("a.btn-danger:has-text('Delete')")
    screens.take(page, "confirm-delete")
    page.click("#confirm-delete")
    expect(page.locator(".flash-ok")).to_contain_text("Environment deletion started")
    screens.take(page, "deleting")
    expect(page.locator("tr[data-env]")).to_have_count(0, timeout=DEPLOY_TIMEOUT_MS)
    expect(page.locator("main")).to_contain_text("No environments yet")
    screens.take(page, "deleted")
    assert box.cloud.stack_names() == []
    assert screens.count >= 9
