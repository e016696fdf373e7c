"""A job's trace in the dashboard: the timeline page and the job page's links from
each task to the rule that queued it.  The job runs for real through a conductor
(simulated cloud, in-memory broker); what it sends back is stored by the API."""
from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest

from apikit import make_api
from fornace.api.dashboard.traceview import timeline
from browserkit import chromium, log_in, overflow
from fornace.common import contract
from fornace.common.broker import Broker
from fornace.conductor.daemon import Conductor, ConductorSettings
from fornace.conductor.executors.simulator import SimulatedCloud
from fornace.conductor.session import Settings
from serving import serving
from test_dashboard import SECRET, Browser, create_env, site_form
from waiting import wait_for

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture
def api(tmp_path):
    return make_api(f"sqlite:///{tmp_path / 'trace.sqlite'}")


@pytest.fixture
def browser(api):
    return Browser(api.client)


def conducted(api, broker_url: str) -> str:
    """Run the API's last published task through a real conductor and store
    what it sends back (job events, the trace, reports, the result)."""
    body, task_id = api.published.tasks[-1]
    daemon = Conductor(ConductorSettings(broker_url=broker_url, data_dir=DATA,
                                         agents="simulator", engine=Settings(agent_timeout=60)),
                       lambda task: SimulatedCloud().executors()[0])
    daemon.start()
    try:
        assert daemon.wait_ready()
        with Broker(broker_url) as broker:
            broker.publish(contract.TASKS, body, task_id)
            seen: list = []

            def ended() -> bool:
                for found, message_id in broker.drain(contract.RESULTS, timeout=0.1):
                    if not message_id.startswith(task_id):
                        continue   # another test's, on the process's in-memory broker
                    seen.append(message_id)
                    if contract.is_job_event(found):
                        api.store.job_events.apply(found, message_id)
                    else:
                        api.store.results.apply(found, message_id)
                return task_id in seen
            wait_for(ended, "the job's result", timeout=60)
            for report, message_id in broker.drain(contract.REPORTS, timeout=0.1):
                if message_id.startswith(task_id):
                    api.store.reports.add(report, message_id)
    finally:
        daemon.shutdown()
    return task_id


def deployed_with_trace(api, browser) -> tuple[str, str]:
    env_id = create_env(browser, f"traced-{uuid.uuid4().hex[:6]}")
    assert browser.post(f"/environments/{env_id}/services/new",
                        site_form(adminPassword=SECRET)).status_code in (303, 200)
    assert browser.post(f"/environments/{env_id}/deploy").status_code == 303
    return env_id, conducted(api, f"memory://{uuid.uuid4().hex[:8]}")


def test_the_trace_page_shows_each_round_s_rules_and_changes(api, browser):
    env_id, job_id = deployed_with_trace(api, browser)
    job_page = browser.get(f"/environments/{env_id}/jobs/{job_id}")
    assert 'id="trace-link"' in job_page
    links = re.findall(r'href="/dashboard/environments/\w+/jobs/\w+/trace#task-(\w+)"[^>]*>'
                       r'rule ([^<]+)</a>', job_page)
    changes = re.findall(r'<tr class="task">\s*<td class="nowrap"><code>(\w+)</code>', job_page)
    assert links and {change for change, _ in links} == set(changes)   # each task: its rule
    page = browser.get(f"/environments/{env_id}/jobs/{job_id}/trace")
    assert '<li class="round panel" id="round-1">' in page and "id=\"round-2\"" in page
    assert re.search(r"<code>[\w/.-]+\.xml:\d+</code>", page)            # where the rule is
    for change, rule in links:                                          # the links' targets
        assert f'id="task-{change}"' in page and f"<b>{rule}</b>" in page
    assert "Model changes of round 1" in page
    assert SECRET not in page and SECRET not in job_page
    # the workflows it ran: the data folder's (no package pinned)
    assert '<p class="packages" id="job-packages">Ran with: <code>data folder</code></p>' in job_page
    assert '<p id="trace-packages">Workflows of: <code>data folder</code></p>' in page
    assert 'id="reconfigured"' not in page                 # a first deployment: none again


def test_a_job_without_a_trace_says_so_and_another_project_is_refused(api, browser):
    env_id = create_env(browser)
    browser.post(f"/environments/{env_id}/services/new", site_form())
    browser.post(f"/environments/{env_id}/deploy")
    _, job_id = api.published.tasks[-1]
    page = browser.get(f"/environments/{env_id}/jobs/{job_id}/trace")
    assert 'id="no-trace"' in page and "still running" in page
    assert 'id="trace-link"' not in browser.get(f"/environments/{env_id}/jobs/{job_id}")
    browser.post("/logout")
    browser.post("/login", {"tenant": "t2", "user": "u2"})
    browser.get(f"/environments/{env_id}/jobs/{job_id}/trace", status=403)


def test_the_trace_page_in_chromium(api, browser, tmp_path):
    env_id, job_id = deployed_with_trace(api, browser)
    folder = Path(os.environ.get("FORNACE_SCREENSHOTS") or tmp_path)
    with serving(api.client.app) as url, chromium() as chrome:
        page = chrome.new_page(viewport={"width": 1280, "height": 900})
        log_in(page, url + "/dashboard", "t1", "u1")
        page.goto(f"{url}/dashboard/environments/{env_id}/jobs/{job_id}")
        page.screenshot(path=str(folder / "trace-job.png"), full_page=True)
        page.click("a.rule-link >> nth=0")
        page.wait_for_selector("#timeline")
        assert page.url.split("#")[1].startswith("task-")
        assert overflow(page) == []
        page.screenshot(path=str(folder / "trace-timeline.png"), full_page=True)


def test_the_timeline_gives_a_success_block_s_changes_to_the_match_that_queued_it():
    match = {"e": "rule", "pass": 1, "rule": "r", "at": "W.xml:3", "object": "services.0"}
    rounds = timeline({"rounds": [{"round": 1, "events": [
        {**match, "id": "a"}, {"e": "queued", "n": 1, "kind": "send-command", "rule": "r"},
        {**match, "id": "b"}, {"e": "queued", "n": 2, "kind": "send-command", "rule": "r"},
        {"e": "task", "n": 1, "change": "C1"},
        {"e": "ended", "n": 1, "outcome": "success"},
        {"e": "set", "rule": "r", "path": "services.0.done", "value": "a"},
        {"e": "ended", "n": 2, "outcome": "failure", "error": "boom"},
        {"e": "set", "rule": "r", "path": "services.0.done", "value": "b"}]}]})
    first, second = rounds[0]["rules"]
    assert [s["value"] for s in first["sets"]] == ["a"] and first["queued"][0]["tasks"] == ["C1"]
    assert [s["value"] for s in second["sets"]] == ["b"]
    assert second["queued"][0]["outcome"]["error"] == "boom"
    assert len(rounds[0]["changes"]) == 2 and rounds[0]["passes"] == 1
