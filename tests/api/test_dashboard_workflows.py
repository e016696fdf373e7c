"""The dashboard's pages of an environment's workflow files (in process, SQLite):
the files in effect (the data folder's, a pinned package's replacing one of the
same name), the check's problems at their lines, the lines whose rules fired
in the environment's last traced job (masked as the trace is), the trace
page's links to those lines, and what is refused (names that are not plain
``*.xml`` names, another project's environment).  The browser test at the end
deploys on the local cloud and takes screenshots of the pages.
"""
from __future__ import annotations

import html
import os
import re
import shutil
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from apikit import Api, Published, free_port, make_api, web_server
from browserkit import chromium, log_in, overflow
from packagekit import WORKFLOW, package_files, zip_of
from test_dashboard import DASH, SECRET, Browser, create_env
from waiting import wait_for
from fornace.api.app import create_app
from fornace.api.auth import NoAuth
from fornace.api.dashboard.workflowpages import firings
from fornace.api.stores.jobs import Jobs
from fornace.api.packages.store import Packages
from fornace.api.packages.pins import Pins
from fornace.api.context import Context
from fornace.api.stores.store import Store
from fornace.api.packages.workflows import WorkflowFiles, plain_name
from fornace.common import contract
from fornace.common.db.engine import make_engine, session_factory, upgrade
from fornace.common.db.models import Package
from fornace.common.resources import BUILTIN_DATA
from fornace.conductor.jobs.tracing import encode
from fornace.conductor.packages.check import package_checker, workflow_checker

SHOTS = Path(os.environ.get("FORNACE_SCREENSHOTS") or "/tmp/shots")
# after the <workflow> line of Common.xml: a problem at line 4 (its first rule moves
# to line 5), and markup in a comment that must come out as text
BROKEN = "    <frobnicate/>\n"
INJECTED = "<!-- <script>alert('x')</script> & </td> -->"
# a rule that never matches but names a plan the catalog lacks: the conductor
# loads it, the check finds it
RETIRED = """    <rule match="$.services[?(@.type == 'retiredService')]"
          desc="Never matches: names a plan the catalog lacks">
        <send-command template="RetiredPlan" error="agentError">
            <parameter name="unit"><select path="id"/></parameter>
        </send-command>
    </rule>
</workflow>"""


def data_folder(root: Path, broken: bool = True) -> Path:
    """A copy of the built-in data, Common.xml edited (see BROKEN and RETIRED)."""
    folder = root / "data"
    shutil.copytree(BUILTIN_DATA, folder, ignore=shutil.ignore_patterns("__pycache__"))
    common = folder / "workflows" / "Common.xml"
    lines = common.read_text().splitlines(keepends=True)
    assert lines[2].strip() == "<workflow>"
    if broken:
        lines[3:3] = [BROKEN]
        lines[1] = INJECTED + "\n"
        common.write_text("".join(lines))
    else:
        common.write_text("".join(lines).replace("</workflow>", RETIRED))
    return folder


def files_app(url: str, data: Path, check: bool = True) -> Api:
    upgrade(url)
    published = Published()
    store = Store(session_factory(make_engine(url)), published)
    jobs = Jobs(store)
    packages = Packages(store.sessions, check=package_checker())
    files = WorkflowFiles(store.sessions, data, workflow_checker() if check else None,
                          packages.limits)
    app = create_app(store, NoAuth("t1", "u1"), jobs=jobs, packages=packages,
                     workflow_files=files)
    api = Api(TestClient(app, raise_server_exceptions=False), store, published, jobs)
    api.packages, api.files = packages, files
    return api


@pytest.fixture
def api(tmp_path):
    api = files_app(f"sqlite:///{tmp_path / 'workflows.sqlite'}", data_folder(tmp_path))
    yield api
    api.files.close()


@pytest.fixture
def browser(api):
    return Browser(api.client)


def pin_greeter(api: Api, env_id: str) -> None:
    """Pin the environment to a package whose Windows.xml replaces the data folder's."""
    ctx = Context("t1", "u1")
    files = {**package_files("greeter"), "workflows/Windows.xml": WORKFLOW.encode()}
    api.packages.upload(ctx, zip_of(files))
    Pins(api.store, api.packages).use(ctx, env_id, "greeter")


def rule(at: str, target: str, rule_id: str = "r", desc: str = "") -> dict:
    event = {"e": "rule", "pass": 1, "rule": rule_id, "at": at, "object": target, "id": None}
    return {**event, "desc": desc} if desc else event


TRACE = {"version": 1, "rounds": [
    {"round": 1, "events": [
        rule("Common.xml:5", "$.services[0].units[0]", "hostnames",
             "Units that have no hostname yet"),
        rule("Common.xml:5", "$.services[0].units[1]", "hostnames",
             "Units that have no hostname yet"),
        rule("Windows.xml:2", "$.services[0].units[0]", "hello"),
        rule("Gone.xml:3", "$.services[0]", "elsewhere"),
        {"e": "queued", "n": 1, "kind": "send-command", "rule": "hello", "at": "Windows.xml:3",
         "template": "Hello", "unit": "u1"}]},
    {"round": 2, "events": [
        rule("Common.xml:5", f"$.services[?(@.adminPassword == '{SECRET}')]", "hostnames",
             "Units that have no hostname yet"),
        rule("Common.xml:5", "$.services[0].units[1]", "hostnames")]}],
    "truncated": False}


def traced_env(api: Api, browser: Browser, pinned: bool = True) -> tuple[str, str]:
    """An environment (pinned to greeter) whose deploy job has TRACE stored."""
    env_id = create_env(browser, f"files-{uuid.uuid4().hex[:6]}")
    if pinned:
        pin_greeter(api, env_id)
    # through the JSON API: a Windows web server, whose adminPassword is the job's secret
    session = api.client.post(f"/environments/{env_id}/configure").json()["id"]
    assert api.client.post(f"/environments/{env_id}/services", json=web_server(),
                           headers={"X-Configuration-Session": session}).status_code == 200
    assert api.client.post(f"/environments/{env_id}/sessions/{session}/deploy"
                           ).status_code == 200
    _, job_id = api.published.tasks[-1]
    document = {**TRACE, "environment_id": env_id, "job_id": job_id, "action": "deploy"}
    api.store.job_events.apply(contract.trace_event_body(env_id, job_id, encode(document)),
                               f"{job_id}-trace")
    return env_id, job_id


def rows(page: str) -> dict[str, list[str]]:
    """file -> the text of its row's cells."""
    found = {}
    for name, cells in re.findall(r'<tr data-file="([^"]+)">(.*?)</tr>', page, re.S):
        found[name] = [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", cell)).split())
                       for cell in re.findall(r"<td[^>]*>(.*?)</td>", cells, re.S)]
    return found


def line_row(page: str, number: int) -> str:
    found = re.search(rf'<tr id="L{number}" class="([^"]*)">(.*?)</tr>', page, re.S)
    assert found, f"no line {number}"
    return found.group(1)


def notes(page: str, number: int) -> list[str]:
    """The texts of the notes under line ``number``."""
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split()).replace(" ,", ",")
            for body in re.findall(rf'<tr class="note [^"]*" data-line="{number}">(.*?)</tr>',
                                   page, re.S)]


# -- the list ----------------------------------------------------------------------------

def test_the_list_shows_each_file_its_source_problems_and_firings(api, browser):
    env_id, job_id = traced_env(api, browser)
    page = browser.get(f"/environments/{env_id}/workflows")
    found = rows(page)
    builtin = sorted(p.name for p in (BUILTIN_DATA / "workflows").glob("*.xml"))
    assert sorted(found) == sorted(set(builtin) | {"hello.xml"})
    assert found["Common.xml"] == ["Common.xml", "data folder", "1 problem", "4×"]
    assert found["Windows.xml"] == ["Windows.xml", "package greeter 1.0.0 replaces the data "
                                    "folder's", "none", "1×"]
    assert found["hello.xml"] == ["hello.xml", "package greeter 1.0.0", "none", "0"]
    assert found["LinuxApp.xml"][1:] == ["data folder", "none", "0"]
    assert f'href="{DASH}/environments/{env_id}/workflows/Common.xml"' in page
    assert f'href="{DASH}/environments/{env_id}/jobs/{job_id}/trace"' in page
    assert "Gone.xml" not in page                  # fired, but not a file in effect


def test_without_a_trace_or_a_checker_the_pages_say_so(tmp_path):
    api = files_app(f"sqlite:///{tmp_path / 'plain.sqlite'}", data_folder(tmp_path),
                    check=False)
    browser = Browser(api.client)
    env_id = create_env(browser)
    listing = browser.get(f"/environments/{env_id}/workflows")
    assert "No job of this environment has a trace yet" in listing
    assert 'id="unchecked"' in listing and "not checked" in listing
    page = browser.get(f"/environments/{env_id}/workflows/Common.xml")
    assert 'id="unchecked"' in page and "b-fired" not in page
    api.files.close()


def test_a_package_that_cannot_be_read_is_named_and_its_files_left_out(api, browser):
    env_id = create_env(browser)
    pin_greeter(api, env_id)
    with api.store.sessions.begin() as db:       # altered behind the API's back
        db.execute(update(Package).values(data=zip_of(package_files("greeter", "9"))))
    page = browser.get(f"/environments/{env_id}/workflows")
    assert "package greeter 1.0.0: its archive does not match its sha256: it was altered" \
        in html.unescape(page)
    assert rows(page)["Windows.xml"][1] == "data folder" and "hello.xml" not in rows(page)


def test_a_dashboard_without_workflow_files_says_they_are_unavailable(tmp_path):
    api = make_api(f"sqlite:///{tmp_path / 'none.sqlite'}")
    browser = Browser(api.client)
    env_id = create_env(browser)
    page = browser.get(f"/environments/{env_id}/workflows", status=503)
    assert "workflow files are unavailable" in page


# -- a file ------------------------------------------------------------------------------

def test_a_file_shows_its_problems_and_firings_at_their_lines(api, browser):
    env_id, job_id = traced_env(api, browser)
    page = browser.get(f"/environments/{env_id}/workflows/Common.xml")
    listed = [html.unescape(p) for p in re.findall(
        r'<li><a href="#L(\d+)"><code>(.*?)</code></a></li>', page)[0]]
    assert listed == ["4", "Common.xml:4: unknown function <frobnicate>"]
    assert "has-problem" in line_row(page, 4)
    assert notes(page, 4) == ["problem unknown function <frobnicate>"]
    # the rule at line 5 matched four times: three objects, one of them masked
    assert "has-firing" in line_row(page, 5)
    [firing] = notes(page, 5)
    assert firing.startswith("fired 4× Units that have no hostname yet rule hostnames on ")
    assert "$.services[0].units[0], $.services[0].units[1], $.services[?(@.adminPassword " \
           "== '***')]" in firing
    assert SECRET not in page
    # every other line is plain, numbered and anchored
    assert line_row(page, 6) == "line" and notes(page, 6) == []
    count = len((api.files.data_dir / "workflows" / "Common.xml").read_text().splitlines())
    assert len(re.findall(r'<tr id="L\d+" class="line', page)) == count
    assert f'<a href="#L{count}">{count}</a>' in page
    # the XML is text: escaped, the comment's markup too
    assert "&lt;workflow&gt;" in page and "<workflow>" not in page
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &lt;/td&gt;" in page
    assert "<script>alert" not in page
    assert f'href="{DASH}/environments/{env_id}/jobs/{job_id}/trace" id="trace-link"' in page


def test_a_package_file_replaces_the_data_folder_s_and_says_so(api, browser):
    env_id, _ = traced_env(api, browser)
    page = browser.get(f"/environments/{env_id}/workflows/Windows.xml")
    assert "from the <a href=" in page and ">package greeter 1.0.0</a>" in page
    assert "replaces</span> the file of the same name in the data folder" in page
    assert "&lt;send-command template=&#34;Hello&#34;" in page or \
           "&lt;send-command template=&quot;Hello&quot;" in page      # the package's text
    assert 'id="no-problems"' in page
    assert notes(page, 2)[0].startswith("fired 1× rule hello on $.services[0].units[0]")
    assert notes(page, 3) == []          # where an action was queued: not a rule's match
    # unpinned, the data folder's Windows.xml is back
    Pins(api.store, api.packages).remove(Context("t1", "u1"), env_id, "greeter")
    again = browser.get(f"/environments/{env_id}/workflows/Windows.xml")
    assert "from the data folder" in again and "replaces" not in again
    browser.get(f"/environments/{env_id}/workflows/hello.xml", status=404)


def test_the_trace_page_links_each_rule_to_its_line(api, browser):
    env_id, job_id = traced_env(api, browser)
    page = browser.get(f"/environments/{env_id}/jobs/{job_id}/trace")
    files = f"{DASH}/environments/{env_id}/workflows"
    assert f'<a class="at-link" href="{files}/Common.xml#L5"' in page
    assert f'<a class="at-link" href="{files}/Windows.xml#L2"' in page
    assert f'<a class="at-link" href="{files}/Gone.xml#L3"' in page   # there: a 404 page


@pytest.mark.parametrize("name", ["..%2Fx.xml", "%2E%2E%2Fdata%2Fx.xml", "x.txt", "..xml",
                                  "Common.xml.txt", "Common", ".hidden.xml", "Nope.xml",
                                  "%2Fetc%2Fpasswd.xml", "a%00.xml"])
def test_names_that_are_not_plain_xml_files_in_effect_are_404(api, browser, name):
    env_id = create_env(browser)
    response = api.client.get(f"{DASH}/environments/{env_id}/workflows/{name}")
    assert response.status_code == 404, response.text
    assert "text/html" in response.headers["content-type"]


def test_another_project_s_environment_is_refused(api, browser):
    env_id, _ = traced_env(api, browser, pinned=False)
    browser.post("/logout")
    browser.post("/login", {"tenant": "t2", "user": "u2"})
    for path in ("/workflows", "/workflows/Common.xml", "/workflows/x.txt"):
        response = api.client.get(f"{DASH}/environments/{env_id}{path}")
        assert response.status_code in (403, 404), (path, response.status_code)
        assert "frobnicate" not in response.text and "Common.xml:" not in response.text
    browser.get("/environments/nope/workflows", status=404)


def test_plain_names_and_firings_by_line():
    assert plain_name("Common.xml") and plain_name("web-stack_2.xml")
    assert not any(plain_name(n) for n in ("../x.xml", "a/b.xml", "x.txt", ".x.xml", "..xml",
                                           "a..b.xml", "x.xml\n", ""))
    found = firings(TRACE)
    assert sorted(found) == ["Common.xml", "Gone.xml", "Windows.xml"]
    assert {line: f.count for line, f in found["Common.xml"].items()} == {5: 4}
    assert found["Common.xml"][5].more == 0 and len(found["Common.xml"][5].objects) == 3
    many = {"rounds": [{"events": [rule("A.xml:1", f"$.u[{n}]") for n in range(9)]}]}
    assert firings(many)["A.xml"][1].more == 4 and firings(None) == {}


# -- in a browser, on a real local-cloud deployment ----------------------------------------

@pytest.fixture
def box(tmp_path):
    from fornace.cli.main import build_conf
    from localkit import running_onebox

    conf = build_conf()
    conf(["up"], project="fornace", default_config_files=[], default_config_dirs=[])
    conf.set_override("data_dir", str(data_folder(tmp_path, broken=False)))
    yield from running_onebox(tmp_path / "state", max_environments=1, conf=conf)


def test_the_file_pages_of_a_local_cloud_deployment_in_chromium(box):
    from playwright.sync_api import expect

    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium() as chrome:
        page = chrome.new_page(viewport={"width": 1366, "height": 900})
        dashboard = box.url + "/dashboard"
        log_in(page, dashboard, "files-tenant", "olga")
        page.fill("#in-env-name", "files-demo")
        page.click("button:has-text('Create environment')")
        env_url = page.url
        page.click("a:has-text('Add service')")
        page.click(".card[data-type=linuxWebServer]")
        page.fill("#in-name", "demo-site")
        page.fill("#in-unitNamingPattern", "web#")
        page.fill("#in-osImage-name", "local")
        page.fill("#in-port", str(free_port()))
        page.fill("#in-units", "2")
        page.click("#save-service")
        page.click("#deploy-button")
        expect(page.locator("#env-status")).to_contain_text("ready", timeout=240_000)
        env_id = env_url.rstrip("/").rsplit("/", 1)[1]

        # pinned to a package from now on: its Windows.xml replaces the data folder's
        ctx = Context("files-tenant", "olga")
        package = {**package_files("greeter"), "workflows/Windows.xml": WORKFLOW.encode()}
        box.api.packages.upload(ctx, zip_of(package))
        Pins(box.api.store, box.api.packages).use(ctx, env_id, "greeter")

        # the list: every file in effect, Common.xml with its problem
        page.goto(f"{env_url}/workflows")
        common = page.locator('tr[data-file="Common.xml"]')
        expect(common).to_contain_text("1 problem")
        expect(page.locator('tr[data-file="Windows.xml"]')).to_contain_text(
            "package greeter 1.0.0")
        expect(page.locator('tr[data-file="Windows.xml"]')).to_contain_text("replaces")
        assert int(page.locator('tr[data-file="LinuxWebServer.xml"] td').nth(3)
                   .inner_text().rstrip("×")) > 0
        page.screenshot(path=str(SHOTS / "workflows-list.png"), full_page=True)
        assert overflow(page) == []

        # from the trace, a rule's place opens its line
        jobs = box.api.jobs.list_jobs(ctx, env_id)
        page.goto(f"{env_url}/jobs/{jobs[0]['id']}/trace")
        page.screenshot(path=str(SHOTS / "workflow-trace-links.png"), full_page=False)
        page.locator('a.at-link[href*="/workflows/LinuxWebServer.xml#L"]').first.click()
        wait_for(lambda: "/workflows/LinuxWebServer.xml#L" in page.url, "the file page")
        line = page.url.rsplit("#L", 1)[1]
        expect(page.locator(f"#L{line}")).to_have_class(re.compile("has-firing"))
        page.screenshot(path=str(SHOTS / "workflow-file-linuxwebserver.png"), full_page=False)
        assert overflow(page) == []

        page.goto(f"{env_url}/workflows/Common.xml")
        expect(page.locator("#problems")).to_contain_text("template 'RetiredPlan'")
        expect(page.locator(".note-firing").first).to_contain_text("fired")
        page.screenshot(path=str(SHOTS / "workflow-file-common.png"), full_page=True)
        problem_line = page.locator("#problems a").first.get_attribute("href")
        page.locator("#problems a").first.click()
        page.screenshot(path=str(SHOTS / "workflow-file-common-problem.png"), full_page=False)
        assert page.url.endswith(problem_line)
        assert overflow(page) == []
