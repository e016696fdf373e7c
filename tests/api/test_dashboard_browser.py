"""The web dashboard in a real browser: Debian's chromium driven by Playwright.

A OneBox (API + conductor + local cloud, folder broker and SQLite) serves the
dashboard; the browser does what a user would: logs in (noauth), creates an
environment, adds a Linux web server with a port out of range, sees the error
at the field, fixes it, deploys on the local cloud, watches the page turn
ready without reloading, opens the job and its task logs, runs the check
action and deletes the environment.  A second user deploys a web farm: the
form has the type's labelled fields and defaults and shows two errors at
once with the typed values kept; the environment page's outputs panel links
the load balancer's URL (which serves the site); a command printing a long
path makes a job page that must not overflow sideways; scaling in asks
first.  Lists filter and page, and the confirmations work with scripts
turned off (an API without a conductor).  Screenshots of each step are saved
in ``$FORNACE_SCREENSHOTS`` (default: a folder of the test's tmp dir).

Without chromium (``/usr/bin/chromium``, or ``$FORNACE_CHROMIUM``) or the
playwright package the test skips -- a failure under FORNACE_REQUIRE_SERVICES=1.
"""
from __future__ import annotations

import json
import os
import re
import urllib.request
from pathlib import Path

import pytest

from apikit import free_port, make_api
from browserkit import chromium, log_in, overflow
from localkit import running_onebox
from serving import serving

DEPLOY_TIMEOUT_MS = 240_000
STEP_TIMEOUT_MS = 30_000


class Screens:
    """Full-page screenshots in one folder, numbered across the tests of a run
    (``count``: those this test took)."""

    taken = 0   # by every test of this run

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.count = 0
        folder.mkdir(parents=True, exist_ok=True)

    def take(self, page, name: str) -> Path:
        self.count += 1
        Screens.taken += 1
        path = self.folder / f"{Screens.taken:02d}-{name}.png"
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
    # never deployed: new, not a green "ready"
    expect(page.locator("#env-status")).to_have_text("new — not deployed")
    screens.take(page, "environment-new")

    # add a Linux web server: a port out of range is shown at the field
    page.click("a:has-text('Add service')")
    page.click(".card[data-type=linuxWebServer]")
    # the image: its name and type, not JSON
    expect(page.locator("#in-osImage-name")).to_have_value("debian-12")
    expect(page.locator("#in-osImage-type")).to_have_value("linux")
    assert overflow(page) == [], overflow(page)
    screens.take(page, "service-form")
    port = free_port()
    page.fill("#in-name", "demo-site")
    page.fill("#in-unitNamingPattern", "web#")
    page.fill("#in-osImage-name", "local")
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
    expect(page.locator("#flash")).to_have_text("Deployment started.")
    page.evaluate("window.fornaceNoReload = true")
    screens.take(page, "deploying")
    expect(page.locator("#env-status")).to_contain_text("ready", timeout=DEPLOY_TIMEOUT_MS)
    assert page.evaluate("window.fornaceNoReload") is True, "the page was reloaded"
    # the message that it started gives way to how it ended; times in one format
    expect(page.locator("#flash")).to_have_text(re.compile(
        r"^Deployment ended at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: success\.$"))
    expect(page.locator("[data-live-note]")).to_have_text(re.compile(r"\d\d:\d\d:\d\d UTC"))
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

    # stop the site on web2, then run the check action; its job page follows it
    # live, and the failed check reads as text
    page.goto(env_url)
    page.click("a:has-text('Run an action')")
    page.click(".card[data-action=execute_operation]")
    page.select_option("#in-operation", "stop")
    web2 = page.locator("#in-node_instance_ids option", has_text="web2")
    page.select_option("#in-node_instance_ids", web2.get_attribute("value"))
    page.click("#run-action")
    expect(page.locator("#job-state")).to_contain_text("success", timeout=DEPLOY_TIMEOUT_MS)
    page.goto(env_url)
    page.click("a:has-text('Run an action')")
    page.click(".card[data-action=check]")
    page.click("#run-action")
    expect(page.locator("#flash")).to_contain_text("Job check started")
    expect(page.locator("#job-state")).to_contain_text("completed_w_errors",
                                                       timeout=DEPLOY_TIMEOUT_MS)
    expect(page.locator("#flash")).to_have_text(re.compile(
        r"^Job check ended at .* UTC: completed with errors\.$"))
    expect(page.locator("#tasks .task")).to_have_count(2)
    failed = page.locator("#tasks .task", has_text="web2")
    expect(failed).to_contain_text("check (Linux/CheckServer)")
    expect(failed.locator("td.summary")).to_contain_text("no answer on http://")
    expect(failed.locator("td.summary")).to_contain_text("exited with code 1")
    expect(page.locator("#reports")).to_contain_text("Check of web2: error — no answer on")
    for place in ("#reports", "#tasks td.summary"):
        for line in page.locator(place).all_inner_texts():
            assert '{"status"' not in line and "stderr:" not in line, line
    assert overflow(page) == [], overflow(page)
    screens.take(page, "check-job-failed")
    page.goto(env_url)
    screens.take(page, "environment-after-check")

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


def test_a_farm_form_its_url_a_long_job_page_and_a_confirmed_scale_in(
        playwright_browser, box, screens):
    from playwright.sync_api import expect

    expect.set_options(timeout=STEP_TIMEOUT_MS)
    page = playwright_browser.new_page(viewport={"width": 1280, "height": 860})
    log_in(page, box.url + "/dashboard", "farm-tenant", "bob")
    page.fill("#in-env-name", "farm-demo")
    page.click("button:has-text('Create environment')")
    expect(page.locator("h1")).to_contain_text("farm-demo")
    env_url = page.url

    # the form of a Linux farm: labels and help from the catalog, defaults, no Windows field
    page.click("a:has-text('Add service')")
    page.click(".card[data-type=linuxWebServerFarm]")
    expect(page.locator("label[for=in-loadBalancerPort]")).to_have_text("Load balancer port*")
    expect(page.locator("label[for=in-unitNamingPattern]")).to_have_text(
        "Unit hostname pattern")
    expect(page.locator("#field-loadBalancerPort .help")).to_contain_text("the farm's URL")
    expect(page.locator("#in-port")).to_have_value("8080")
    expect(page.locator("#in-flavor")).to_have_value("m1.small")
    for windows in ("adminPassword", "domain", "availabilityZone"):
        expect(page.locator(f"#in-{windows}")).to_have_count(0)

    # two mistakes: both shown at once, at their fields, with what was typed kept
    site_port, balancer_port = free_port(), free_port()
    page.fill("#in-name", "web-farm")
    page.fill("#in-port", str(site_port))
    page.fill("#in-unitNamingPattern", "farm_#")
    page.fill("#in-loadBalancerPort", "70000")
    page.fill("#in-units", "2")
    page.click("#save-service")
    expect(page.locator("#field-unitNamingPattern .error")).to_contain_text("may only contain")
    expect(page.locator("#field-loadBalancerPort .error")).to_contain_text(
        "between 1 and 65535")
    expect(page.locator(".field.has-error")).to_have_count(2)
    expect(page.locator("#form-errors")).to_contain_text("2 fields need correcting")
    expect(page.locator("#in-unitNamingPattern")).to_have_value("farm_#")
    expect(page.locator("#in-loadBalancerPort")).to_have_value("70000")
    expect(page.locator("#in-name")).to_have_value("web-farm")
    assert overflow(page) == [], overflow(page)
    screens.take(page, "service-form-two-errors")
    page.fill("#in-unitNamingPattern", "farm#")
    page.fill("#in-loadBalancerPort", str(balancer_port))
    page.click("#save-service")
    expect(page.locator(".flash-ok")).to_contain_text("web-farm saved in the session")

    # deployed: the outputs panel links the load balancer's URL, which serves the site
    page.click("#deploy-button")
    expect(page.locator("#env-status")).to_contain_text("ready", timeout=DEPLOY_TIMEOUT_MS)
    farm_link = page.locator("#outputs .output-service a.url")
    expect(farm_link).to_have_text(re.compile(rf"^http://[0-9.]+:{balancer_port}/$"))
    expect(page.locator("#outputs .output-unit a.url")).to_have_count(2)
    expect(page.locator("#outputs")).to_contain_text("farm2")
    url = farm_link.inner_text()
    assert farm_link.get_attribute("href") == url
    with urllib.request.urlopen(url, timeout=10) as site:
        assert "web-farm" in site.read().decode()
    assert overflow(page) == [], overflow(page)
    screens.take(page, "farm-outputs")

    # a command printing a long path: the job page wraps it instead of overflowing
    long_path = "/srv/fornace/" + "/".join(f"releases_{n:02d}_{'x' * 12}" for n in range(14))
    page.click("a:has-text('Run an action')")
    page.click(".card[data-action=execute_operation]")
    page.select_option("#in-operation", "run")
    page.fill("#in-operation_kwargs", json.dumps({"command": f"echo {long_path}"}))
    page.select_option("#in-allow_kwargs_override", "true")
    page.click("#run-action")
    expect(page.locator(".flash-ok")).to_contain_text("Job execute_operation started")
    expect(page.locator("#job-state")).to_contain_text("success", timeout=DEPLOY_TIMEOUT_MS)
    expect(page.locator("#tasks")).to_contain_text(long_path)
    expect(page.locator("#tasks td.summary").first).not_to_contain_text("['")
    assert overflow(page) == [], overflow(page)
    screens.take(page, "job-long-path")

    # the environment page lists it with the other actions, not with the deployments
    page.goto(env_url)
    expect(page.locator("#action-jobs")).to_contain_text("execute_operation")
    expect(page.locator("#jobs")).not_to_contain_text("execute_operation")

    # scaling in asks first, naming the unit that goes; then runs
    page.click("a:has-text('Run an action')")
    page.click(".card[data-action=scale]")
    page.select_option("#in-node_id", label="web-farm (linuxWebServerFarm)")
    page.fill("#in-delta", "-1")
    page.click("#run-action")
    expect(page.locator("#confirmation")).to_contain_text("goes from 2 to 1 unit(s)")
    expect(page.locator("#confirmation li")).to_contain_text("farm2")
    screens.take(page, "confirm-scale-in")
    page.click("#confirm-action")
    expect(page.locator(".flash-ok")).to_contain_text("Job scale started")
    expect(page.locator("#job-state")).to_contain_text("success", timeout=DEPLOY_TIMEOUT_MS)
    page.goto(env_url)
    expect(page.locator("#outputs .output-unit")).to_have_count(1)
    expect(page.locator("#action-jobs")).to_contain_text("scale")

    # the jobs page: deployments apart from the other actions
    page.click(".sidebar a:has-text('Deployments')")
    expect(page.locator("#all-jobs tr[data-action]")).to_have_count(1)
    expect(page.locator("#all-jobs")).to_contain_text("deploy")
    page.click(".tabs a[data-kind=actions]")
    expect(page.locator("#all-jobs tr[data-action]")).to_have_count(2)
    expect(page.locator("#all-jobs")).not_to_contain_text("deploy")
    assert overflow(page) == [], overflow(page)
    screens.take(page, "other-actions")
    assert screens.count >= 5


@pytest.fixture
def api_only(tmp_path):
    """An API without a conductor (nothing is deployed), on a real port."""
    api = make_api(f"sqlite:///{tmp_path / 'dash.sqlite'}")
    with serving(api.client.app) as url:
        yield url


def test_lists_filter_and_page_and_confirmations_work_without_scripts(
        playwright_browser, api_only, screens):
    from playwright.sync_api import expect

    expect.set_options(timeout=STEP_TIMEOUT_MS)
    context = playwright_browser.new_context(java_script_enabled=False,
                                             viewport={"width": 1280, "height": 800})
    page = context.new_page()
    dashboard = api_only + "/dashboard"
    log_in(page, dashboard, "list-tenant", "carol")
    for name in ("alpha", "beta", "alphabet", "gamma"):
        page.fill("#in-env-name", name)
        page.click("button:has-text('Create environment')")
        expect(page.locator(".flash-ok")).to_contain_text(f"Environment {name} created")
        page.goto(dashboard + "/")

    # filter by name, then page through the rest two at a time
    page.fill("#in-q", "alpha")
    page.click("#env-filter button:has-text('Filter')")
    expect(page.locator("tr[data-env]")).to_have_count(2)
    expect(page.locator("#environments")).not_to_contain_text("gamma")
    assert "q=alpha" in page.url
    page.goto(dashboard + "/?per_page=2")
    expect(page.locator("tr[data-env]")).to_have_count(2)
    expect(page.locator(".pager")).to_contain_text("1–2 of 4 environments")
    page.click(".pager a[rel=next]")
    expect(page.locator(".pager")).to_contain_text("3–4 of 4 environments")
    expect(page.locator("#environments")).to_contain_text("gamma")
    screens.take(page, "environments-paged")

    # remove a service: a confirmation page, then the session has it removed
    page.click("#environments a:has-text('gamma')")
    page.click("a:has-text('Add service')")
    page.click(".card[data-type=linuxWebServer]")
    page.fill("#in-name", "site")
    page.click("#save-service")
    expect(page.locator(".flash-ok")).to_contain_text("site saved in the session")
    page.click("#services a:has-text('Remove')")
    expect(page.locator("h1")).to_have_text("Remove service site?")
    screens.take(page, "confirm-remove-service")
    page.click("#confirm-remove")
    expect(page.locator(".flash-ok")).to_contain_text("Service removed in the session")
    expect(page.locator("#services")).to_have_count(0)

    # a busy environment's delete page (no conductor here: its deployment runs
    # until abandoned) offers no delete button: it says why and links the job
    page.goto(dashboard + "/")
    page.click("#environments a:has-text('beta')")
    page.click("a:has-text('Add service')")
    page.click(".card[data-type=linuxWebServer]")
    page.fill("#in-name", "busy-site")
    page.click("#save-service")
    page.click("#deploy-button")
    expect(page.locator("#env-status")).to_have_text("deploying")
    page.click("a.btn-danger:has-text('Delete')")
    expect(page.locator("#confirm-delete")).to_be_disabled()
    expect(page.locator("#busy-reason")).to_contain_text("is running since")
    expect(page.locator("#busy-reason a")).to_have_text("deploy")
    expect(page.locator("#forget")).to_be_enabled()
    assert overflow(page) == [], overflow(page)
    screens.take(page, "confirm-delete-busy")
    page.click("#busy-reason a")
    expect(page.locator("#job-state")).to_have_text("running")
    page.go_back()
    page.click("#forget")
    expect(page.locator(".flash-ok")).to_contain_text("removed without tearing it down")
    expect(page.locator("tr[data-env]")).to_have_count(3)
    page.click("#environments a:has-text('gamma')")

    # deleting the environment: its confirmation page, without scripts too
    page.click("a.btn-danger:has-text('Delete')")
    page.click("#confirm-delete")
    expect(page.locator(".flash-ok")).to_contain_text("Environment deleted (it was never")
    expect(page.locator("tr[data-env]")).to_have_count(2)
    context.close()
