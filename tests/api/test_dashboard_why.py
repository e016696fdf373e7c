"""Why a rule matches a unit, or not, in process (SQLite): ``GET
/environments/{id}/why`` and the dashboard's rule page, reached from the
"why?" link of a rule's line on its file page; the trace page's hosts and
causes (and an old trace's rows without them)."""
from __future__ import annotations

import html
import re

import pytest
from fastapi.testclient import TestClient

from apikit import Api, Published
from test_dashboard import Browser, create_env, site_form
from test_dashboard_workflows import data_folder
from fornace.api.app import create_app
from fornace.api.auth import NoAuth
from fornace.api.packages.workflows import WorkflowFiles
from fornace.api.stores.jobs import Jobs
from fornace.api.stores.store import Store
from fornace.common import contract
from fornace.common.db.engine import make_engine, session_factory, upgrade
from fornace.conductor.packages.why import rule_explainer


@pytest.fixture
def api(tmp_path):
    url = f"sqlite:///{tmp_path / 'why.sqlite'}"
    upgrade(url)
    published = Published()
    store = Store(session_factory(make_engine(url)), published)
    files = WorkflowFiles(store.sessions, data_folder(tmp_path, broken=False), None,
                          explain=rule_explainer())
    app = create_app(store, NoAuth("t1", "u1"), jobs=Jobs(store), workflow_files=files)
    yield Api(TestClient(app, raise_server_exceptions=False), store, published)
    files.close()


@pytest.fixture
def browser(api):
    return Browser(api.client)


def deployed(api: Api, browser: Browser) -> str:
    """A web site of two units, deployed: the first has its hostname, the second not."""
    env_id = create_env(browser, "why-env")
    assert browser.post(f"/environments/{env_id}/services/new",
                        site_form()).status_code == 303
    assert browser.post(f"/environments/{env_id}/deploy").status_code == 303
    body, message_id = api.published.tasks[-1]
    model = {k: v for k, v in body.items() if k not in ("token", "tenant_id", "job")}
    model["services"][0]["units"][0]["state"] = {"hostname": "web1", "siteDeployed": True}
    api.store.results.apply(contract.result_body(model), message_id)
    return env_id


def cells(page: str) -> dict[str, str]:
    """object path -> the text of its row."""
    return {path: " ".join(html.unescape(re.sub(r"<[^>]+>", " ", row)).split())
            for path, row in re.findall(r'<tr class="object \w+" data-object="([^"]+)">(.*?)</tr>',
                                        page, re.S)}


def test_the_rule_page_says_per_unit_which_clause_refused_it(api, browser):
    env_id = deployed(api, browser)
    files = f"/environments/{env_id}/workflows"
    source = browser.get(f"{files}/Common.xml")
    # the rule's start tag spans lines 4-5; the engine places it at 5
    assert f'<a class="why-link" href="/dashboard{files}/Common.xml/rules/5"' in source
    page = browser.get(f"{files}/Common.xml/rules/5")
    assert "Why: Units that have no hostname yet" in page
    assert "Matches 1 of 2 objects" in page
    rows = cells(page)
    assert rows["services.0.units.0"].startswith("web1 services.0.units.0")
    assert ("no refused by [?(not @.state.hostname)] not @.state.hostname is false: "
            "state.hostname = 'web1'") in rows["services.0.units.0"]
    assert rows["services.0.units.1"].endswith(
        "matches not @.state.hostname is true: state.hostname = absent")
    # one unit, by its hostname; a name that is no unit's: said, with the close ones
    one = browser.get(f"{files}/Common.xml/rules/5?unit=web1")
    assert list(cells(one)) == ["services.0.units.0"] and "of unit web1" in one
    wrong = browser.get(f"{files}/Common.xml/rules/5?unit=web9", status=404)
    assert "no unit has the id, hostname or name &#39;web9&#39;; close names: &#39;web1&#39;" \
        in wrong and len(cells(wrong)) == 2
    # a line where no rule is: 404
    assert "no rule is named" in html.unescape(browser.get(f"{files}/Common.xml/rules/3",
                                                           status=404))
    # the site's rule: no unit has an instance before a deployment's first round
    page = browser.get(f"{files}/LinuxWebServer.xml/rules/33")
    assert "Matches 0 of 2 objects" in page
    assert all("@.temp.instanceName is false: temp.instanceName = absent" in row
               for row in cells(page).values())
    assert "on success: set path=state.siteDeployed" in html.unescape(page)


def test_the_json_route_and_who_may_ask(api, browser):
    env_id = deployed(api, browser)
    answer = api.client.get(f"/environments/{env_id}/why",
                            params={"rule": "Units that have no hostname yet", "unit": "web1"})
    assert answer.status_code == 200, answer.text
    [unit] = answer.json()["objects"]
    assert unit["refused"]["because"] == ["not @.state.hostname is false: "
                                          "state.hostname = 'web1'"]
    missing = api.client.get(f"/environments/{env_id}/why", params={"rule": "Common.xml:69x"})
    assert missing.status_code == 404
    assert missing.json()["error"]["close"][0] == "Common.xml:69"
    assert api.client.get(f"/environments/{env_id}/why",
                          params={"rule": " "}).status_code == 400
    other = api.client.get(f"/environments/{env_id}/why", params={"rule": "Common.xml:5"},
                           headers={"X-Tenant-Id": "t2", "X-User-Id": "u2"})
    assert other.status_code in (403, 404) and "web1" not in other.text
    browser.post("/logout")
    browser.post("/login", {"tenant": "t2", "user": "u2"})
    response = api.client.get(f"/dashboard/environments/{env_id}/workflows/Common.xml/rules/5")
    assert response.status_code in (403, 404) and "web1" not in response.text


def test_the_trace_page_names_hosts_and_causes(api, browser):
    from fornace.conductor.jobs.tracing import encode

    env_id = deployed(api, browser)
    job_id = api.published.tasks[-1][1]
    rule = {"e": "rule", "pass": 1, "rule": "line24", "at": "Common.xml:24",
            "object": "services.0.units.0", "id": "u1", "host": "web1",
            "cause": ["services.0.type: 'linuxWebServer'", "temp.instanceName: absent"]}
    old = {"e": "rule", "pass": 1, "rule": "line5", "at": "Common.xml:5",
           "object": "services.0.units.1", "id": "u2"}
    queued = {"e": "queued", "n": 1, "kind": "update-cf-stack", "rule": "line24",
              "at": "Common.xml:24", "template": "LinuxInstance", "unit": "u1"}
    document = {"version": 1, "environment_id": env_id, "job_id": job_id, "action": "deploy",
                "rounds": [{"round": 1, "events": [old, rule, queued]}], "truncated": False}
    api.store.job_events.apply(contract.trace_event_body(env_id, job_id, encode(document)),
                               f"{job_id}-trace")
    page = html.unescape(browser.get(f"/environments/{env_id}/jobs/{job_id}/trace"))
    text = " ".join(re.sub(r"<[^>]+>", " ", page).split()).replace(" ,", ",")
    assert ("web1 services.0.units.0 id u1 because services.0.type: 'linuxWebServer', "
            "temp.instanceName: absent") in text
    assert "services.0.units.1 id u2 nothing" in text          # an old record: as before
    assert "on unit u1 web1" in text                           # the action's unit by host
    rules = f"/dashboard/environments/{env_id}/workflows/Common.xml/rules"
    assert f'href="{rules}/24" title="does this rule match each unit now' in page


def test_rule_places_skip_quoted_brackets():
    from fornace.api.dashboard.workflowpages import rule_places

    text = ['<workflow>', '  <rule match="$[?(@.n > 2)]"', '        desc="a > b">',
            '    <rules-like/>', '  <rule match="x"/>', '</workflow>']
    assert rule_places(text) == {2: 3, 5: 5}


def test_the_rule_page_in_chromium(api, browser):
    from browserkit import chromium, log_in, overflow
    from playwright.sync_api import expect
    from serving import serving
    from test_dashboard_workflows import SHOTS

    deployed(api, browser)
    SHOTS.mkdir(parents=True, exist_ok=True)
    with serving(api.client.app) as url, chromium() as chrome:
        page = chrome.new_page(viewport={"width": 1366, "height": 900})
        log_in(page, url + "/dashboard", "t1", "u1")
        page.click("a:has-text('why-env')")
        page.goto(page.url.rstrip("/") + "/workflows/Common.xml")
        page.locator("#L4").scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "why-file-link.png"), full_page=False)
        page.locator("#L4 a.why-link").click()
        expect(page.locator("h1")).to_contain_text("Why: Units that have no hostname yet")
        expect(page.locator('tr[data-object="services.0.units.0"]')).to_contain_text(
            "not @.state.hostname is false: state.hostname = 'web1'")
        page.screenshot(path=str(SHOTS / "why-rule.png"), full_page=True)
        assert overflow(page) == []
        page.fill("#in-unit", "web1")
        page.click("#unit-form button")
        expect(page.locator("#summary")).to_contain_text("of unit web1")
        page.screenshot(path=str(SHOTS / "why-rule-unit.png"), full_page=True)
        assert overflow(page) == []
