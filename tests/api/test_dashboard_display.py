"""What the dashboard shows as a user reads it (issue 32), in process (SQLite):
one time format on every page, a never deployed environment shown as new (its
REST status stays Murano 0.2's ``ready``), the message that a job started
giving way to how it ended, a failed check read as text (secrets masked), and
the OS image as a name and a type instead of JSON.  The browser test
(test_dashboard_browser.py) looks at the same pages with the progress script
running.
"""
from __future__ import annotations

import datetime
import html
import re

from fornace.api.dashboard import display, readable
from fornace.common import contract
from test_dashboard import create_env, deployed_env, finish, site_form
from test_dashboard import api, browser  # noqa: F401 -- the fixtures
from test_dashboard_forms import input_value, session_services

# a time as every page shows it; and anything that looks like a time of day
ONE_FORMAT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")
TIME_OF_DAY = re.compile(r"\d\d:\d\d:\d\d")
FAILED_CHECK = ('CommandFailed; check_server.py exited with code 1; stderr: {"status": '
                '"error", "detail": "no answer on http://127.0.0.9:8080/ (refused)"}')


def shown_text(page: str) -> str:
    """A page's text as a person reads it (no tags, no attributes)."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", page)))


def test_one_time_format_whatever_the_api_wrote():
    assert display.when("2026-11-28T10:31:05") == "2026-11-28 10:31:05 UTC"
    assert display.when("2026-11-28T10:31:05.123456") == "2026-11-28 10:31:05 UTC"
    assert display.when("2026-11-28T11:31:05+01:00") == "2026-11-28 10:31:05 UTC"
    assert display.when("2026-11-28T10:31:05Z") == "2026-11-28 10:31:05 UTC"
    assert display.when(datetime.datetime(2026, 11, 28, 10, 31, 5)) == \
        "2026-11-28 10:31:05 UTC"
    assert display.when(None) == "" and display.when("soon") == "soon"
    assert ONE_FORMAT.fullmatch(display.now())


def test_every_time_of_the_environment_and_job_pages_has_one_format(api, browser):
    env_id = deployed_env(api, browser)
    job_id = api.published.tasks[-1][1]
    api.store.job_events.apply(contract.task_event_body(
        env_id, job_id, {"change_id": "01A", "status": "ok", "target_name": "web1",
                         "operation": "Deploy", "started": "2026-11-28T10:31:05",
                         "finished": "2026-11-28T10:31:09"}), "ev-1")
    api.store.reports.add(contract.report_body(env_id, "environment", "all done", "info",
                                               env_id), "rep-1")
    pages = {"environment": browser.get(f"/environments/{env_id}"),
             "job": browser.get(f"/environments/{env_id}/jobs/{job_id}"),
             "list": browser.get("/"), "jobs": browser.get("/deployments")}
    for name, page in pages.items():
        text = shown_text(page)
        times = TIME_OF_DAY.findall(text)
        assert times, name
        assert len(ONE_FORMAT.findall(text)) == len(times), (name, text)
    assert "2026-11-28 10:31:05 UTC" in shown_text(pages["job"])
    # the progress script's notes use the server's time, in the same format
    live = api.client.get(f"/dashboard/environments/{env_id}/live").json()
    assert ONE_FORMAT.fullmatch(live["at"])
    script = api.client.get("/dashboard/static/live.js").text
    assert "toLocale" not in script and "new Date" not in script


def test_a_never_deployed_environment_is_new_not_ready(api, browser):
    env_id = create_env(browser, "fresh")
    page = browser.get(f"/environments/{env_id}")
    status = re.search(r'<span id="env-status">(.*?)</span>\s*</h1>', page, re.S).group(1)
    assert ">new — not deployed<" in status and "b-ready" not in status
    listing = browser.get("/")
    assert "new — not deployed" in listing and "b-ready" not in listing
    # the REST API answers as Murano 0.2 does
    assert api.client.get(f"/environments/{env_id}").json()["status"] == "ready"
    # once deployed, it is ready
    browser.post(f"/environments/{env_id}/services/new", site_form())
    browser.post(f"/environments/{env_id}/deploy")
    finish(api)
    page = browser.get(f"/environments/{env_id}")
    assert 'class="badge b-ready">ready<' in page and "not deployed" not in page


def test_the_started_message_gives_way_to_how_the_job_ended(api, browser):
    env_id = create_env(browser)
    browser.post(f"/environments/{env_id}/services/new", site_form())
    started = browser.post(f"/environments/{env_id}/deploy")
    page = browser.follow(started)
    assert re.search(r'<div class="flash flash-ok" [^>]*data-live-flash>Deployment started.<',
                     page)
    live = api.client.get(f"/dashboard/environments/{env_id}/live").json()
    assert live["busy"] is True and live["outcome"] is None
    finish(api)
    live = api.client.get(f"/dashboard/environments/{env_id}/live").json()
    assert live["busy"] is False
    assert live["outcome"]["level"] == "ok"
    assert ONE_FORMAT.search(live["outcome"]["text"])
    assert live["outcome"]["text"].startswith("Deployment ended at ")
    assert live["outcome"]["text"].endswith(": success.")
    # a page opened after the end shows the outcome, not "started"
    again = browser.post(f"/environments/{env_id}/deploy")
    api.store.reports.add(contract.report_body(env_id, "environment", "broken", "error",
                                               env_id), "rep-err")
    finish(api)
    page = browser.follow(again)
    assert "Deployment started." not in page
    assert re.search(r'<div class="flash flash-error" [^>]*>Deployment ended at [^<]*: '
                     r'completed with errors.<', page), page
    # an action's job page does the same
    check = browser.post(f"/environments/{env_id}/actions/check")
    job_id = api.published.tasks[-1][1]
    assert "Job check started." in browser.follow(check)
    finish(api)
    job_live = api.client.get(f"/dashboard/environments/{env_id}/jobs/{job_id}/live").json()
    assert job_live["outcome"]["text"].startswith("Job check ended at ")
    # the script replaces the message with the outcome (or drops it) once idle
    script = api.client.get("/dashboard/static/live.js").text
    assert "data-live-flash" in script and "outcome" in script


def test_check_results_read_as_text():
    assert readable.readable(f"Check of web1: error ({FAILED_CHECK})") == (
        "Check of web1: error — no answer on http://127.0.0.9:8080/ (refused); "
        "check_server.py exited with code 1")
    assert readable.readable(FAILED_CHECK) == (
        "no answer on http://127.0.0.9:8080/ (refused); check_server.py exited with code 1")
    assert readable.readable('ok: {"status": "degraded", "detail": "404 on /"}') == \
        "degraded: 404 on /"
    assert readable.readable('ok: {"status": "ok"}') == "ok"
    # other objects read as pairs, a secret masked; what is not JSON stays
    assert readable.readable('sent {"user": "ann", "password": "hunter2"} {oops') == \
        "sent user: ann; password: *** {oops"
    assert readable.readable("ok: serving http://h:1/") == "ok: serving http://h:1/"
    assert readable.details_text("{'message': 'boom', 'adminPassword': 'x'}") == \
        "message: boom\nadminPassword: ***"
    deep = "{" * 5000 + "}" * 5000       # read within bounds, shown as it is
    assert readable.readable(deep) == deep
    heads = "Check of a" + ": error (" * 1000 + ")" * 1000   # one head, not 1000 tries
    assert readable.readable(heads).startswith("Check of a: error — : error (")


def test_a_failed_checks_job_page_reads_as_text_with_secrets_masked(api, browser):
    env_id = deployed_env(api, browser)
    browser.post(f"/environments/{env_id}/actions/check")
    job_id = api.published.tasks[-1][1]
    secret_detail = FAILED_CHECK.replace('"detail"', '"token": "s3cr3t-t0ken", "detail"')
    api.store.job_events.apply(contract.task_event_body(
        env_id, job_id, {"change_id": "01A", "status": "error", "target_name": "web1",
                         "operation": "check (Linux/CheckServer)", "reason": "check",
                         "summary": secret_detail}), "ev-1")
    api.store.reports.add(contract.report_body(
        "u1", "unit", f"Check of web1: error ({FAILED_CHECK})", "error", env_id), "rep-1")
    finish(api)
    page = browser.get(f"/environments/{env_id}/jobs/{job_id}")
    text = shown_text(page)
    assert "Check of web1: error — no answer on http://127.0.0.9:8080/ (refused); " \
           "check_server.py exited with code 1" in text
    row = re.search(r'<tr class="task">(.*?)</tr>', page, re.S).group(1)
    assert "web1" in row and "check (Linux/CheckServer)" in row
    assert "no answer on http://127.0.0.9:8080/ (refused)" in html.unescape(row)
    assert '{"status"' not in text and "stderr:" not in text
    assert "s3cr3t-t0ken" not in page and "token: ***" in text
    environment = shown_text(browser.get(f"/environments/{env_id}"))
    assert "Check of web1: error — no answer" in environment and '{"status"' not in environment


def test_the_os_image_is_a_name_and_a_type_not_json(api, browser):
    env_id = create_env(browser)
    path = f"/environments/{env_id}/services/new"
    form = site_form(**{"osImage.name": "debian-13", "osImage.type": "linux"})
    assert browser.post(path, form).status_code == 303
    assert session_services(api, env_id)[0]["osImage"] == {"name": "debian-13",
                                                           "type": "linux"}
    service_id = session_services(api, env_id)[0]["id"]
    edit = browser.get(f"/environments/{env_id}/services/{service_id}/edit")
    assert input_value(edit, "osImage.name") == "debian-13"
    assert input_value(edit, "osImage.type") == "linux"
    assert 'name="osImage"' not in edit
    # an emptied type is left out; the name stays required
    changed = site_form(**{"osImage.name": "debian-12", "osImage.type": " "})
    assert browser.post(f"/environments/{env_id}/services/{service_id}/edit",
                        changed).status_code == 303
    assert session_services(api, env_id)[0]["osImage"] == {"name": "debian-12"}
    # a stored plain name (a Murano 0.2 client's) is shown as the name, and the
    # form still takes the field as one value (JSON, or a name) from scripts
    plain = site_form(name="plain", osImage="ws-2019-std")
    del plain["osImage.name"], plain["osImage.type"]
    assert browser.post(path, plain).status_code == 303
    plain_id = next(s["id"] for s in session_services(api, env_id) if s["name"] == "plain")
    assert next(s for s in session_services(api, env_id)
                if s["name"] == "plain")["osImage"] == "ws-2019-std"
    edit = browser.get(f"/environments/{env_id}/services/{plain_id}/edit")
    assert input_value(edit, "osImage.name") == "ws-2019-std"
    as_json = site_form(name="json", osImage='{"name": "local", "type": "linux"}')
    del as_json["osImage.name"], as_json["osImage.type"]
    assert browser.post(path, as_json).status_code == 303
    assert next(s for s in session_services(api, env_id)
                if s["name"] == "json")["osImage"] == {"name": "local", "type": "linux"}
