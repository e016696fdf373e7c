"""The web dashboard over HTTP (in process, SQLite): pages, forms, actions, login.

The browser test (test_dashboard_browser.py) drives a real deployment; these
check each route's behaviour: pages render, form errors are shown at their
field, posts redirect, the form token is required, and no password ever
appears in a page (keystone mode's login: test_dashboard_login.py).
"""
from __future__ import annotations

import html
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fornace.api import specs
from fornace.api.dashboard import graph, serviceform
from fornace.common.db.models import ConfigSession
from apikit import make_api
from fornace.common import contract

SECRET = "P@ssw0rd-web"
DASH = "/dashboard"
OWN = {"Origin": "http://testserver"}   # what a browser sends with the dashboard's forms
_TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


def page_token(page: str) -> str:
    """The form token of a page."""
    found = _TOKEN.search(page)
    assert found, "the page has no form token"
    return found.group(1)


@pytest.fixture
def api(tmp_path):
    return make_api(f"sqlite:///{tmp_path / 'dash.sqlite'}")


class Browser:
    """A TestClient that keeps cookies, sends the form token and keeps every page."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.pages: list[str] = []

    def get(self, path: str, status: int = 200) -> str:
        response = self.client.get(DASH + path)
        assert response.status_code == status, (path, response.status_code, response.text)
        self.pages.append(response.text)
        return response.text

    def token(self) -> str:
        """The form token of this browser's session (as its pages have it)."""
        return page_token(self.client.get(DASH + "/login").text)

    def post(self, path: str, data: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        form = {"csrf_token": self.token(), **(data or {})}
        kwargs["headers"] = {**OWN, **kwargs.get("headers", {})}
        response = self.client.post(DASH + path, data=form, follow_redirects=False, **kwargs)
        self.pages.append(response.text)
        return response

    def follow(self, response: Any, status: int = 303) -> str:
        """The page a POST redirected to."""
        assert response.status_code == status, response.text
        location = response.headers["location"]
        assert location.startswith(DASH + "/")
        return self.get(location[len(DASH):])


@pytest.fixture
def browser(api):
    return Browser(api.client)


def field_error(page: str, name: str) -> str | None:
    """The error shown in the form field ``name`` (None: no error there)."""
    found = re.search(rf'<div class="field has-error" id="field-{re.escape(name)}">(.*?)</div>',
                      page, re.S)
    if not found:
        return None
    message = re.search(r'<p class="error" role="alert">(.*?)</p>', found.group(1), re.S)
    return html.unescape(message.group(1).strip()) if message else None


def create_env(browser: Browser, name: str = "env1") -> str:
    response = browser.post("/environments", {"name": name})
    assert response.status_code == 303
    return response.headers["location"].rsplit("/", 1)[1]


def site_form(**values: str) -> dict[str, str]:
    return {"type": "linuxWebServer", "name": "site", "port": "8080", "units": "2",
            "unitNamingPattern": "web#", "osImage.name": "local", "osImage.type": "linux",
            **values}


def finish(api) -> None:
    """What the conductor sends back at the end of the last job: its final model."""
    body, message_id = api.published.tasks[-1]
    model = {k: v for k, v in body.items() if k not in ("token", "tenant_id", "job")}
    api.store.results.apply(contract.result_body(model), message_id)


def deployed_env(api, browser: Browser) -> str:
    env_id = create_env(browser)
    assert browser.post(f"/environments/{env_id}/services/new",
                        site_form()).status_code == 303
    assert browser.post(f"/environments/{env_id}/deploy").status_code == 303
    finish(api)
    return env_id


# -- pages ----------------------------------------------------------------------------

def test_the_dashboard_is_mounted_beside_the_untouched_json_api(api, browser):
    assert api.client.get("/dashboard", follow_redirects=False).status_code in (307, 308)
    page = browser.get("/")
    assert "<title>Environments · Fornace</title>" in page
    assert "No environments yet" in page
    assert api.client.get("/environments").json() == {"environments": []}
    assert api.client.get("/v1/environments").json() == {"environments": []}
    assert not any(p.startswith("/dashboard") for p in api.client.get("/openapi.json")
                   .json()["paths"])
    missing = api.client.get("/dashboard/nowhere")
    assert missing.status_code == 404 and "text/html" in missing.headers["content-type"]
    assert api.client.get("/nowhere").json()["error"]["code"] == 404


def test_static_files_and_security_headers(api):
    css = api.client.get("/dashboard/static/dashboard.css")
    assert css.status_code == 200 and "text/css" in css.headers["content-type"]
    script = api.client.get("/dashboard/static/live.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert "fetch(" in script.text
    page = api.client.get("/dashboard/")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["x-frame-options"] == "DENY"
    # nothing is loaded from another site, and no inline script
    assert not re.search(r'(src|href)="(https?:)?//', page.text)
    assert "<script>" not in page.text


def test_every_page_renders(api, browser):
    env_id = deployed_env(api, browser)
    page = browser.get(f"/environments/{env_id}")
    assert "linuxWebServer" in page and "site_instance_1" in page
    assert '<svg class="topology"' in page
    job_id = re.search(r'/jobs/([0-9a-f]+)"', page).group(1)
    assert "deploy" in browser.get(f"/environments/{env_id}/jobs/{job_id}")
    assert "linuxWebServer" in browser.get(f"/environments/{env_id}/services/new")
    for name, spec in specs.SERVICE_TYPES.items():
        form = browser.get(f"/environments/{env_id}/services/new?type={name}")
        shown = {field.name for field, _ in serviceform.shown_fields(spec)}
        for field in spec.fields:
            assert (f'name="{field.name}"' in form) == (field.name in shown), (name, field.name)
        assert 'name="units"' in form
    service_id = re.search(r'/services/([0-9a-f]+)/edit', page).group(1)
    edit = browser.get(f"/environments/{env_id}/services/{service_id}/edit")
    assert 'value="site"' in edit and 'value="8080"' in edit
    assert "check" in browser.get(f"/environments/{env_id}/actions")
    for action in ("check", "heal", "scale", "execute_operation", "install", "uninstall",
                   "plan"):
        assert "Run" in browser.get(f"/environments/{env_id}/actions/{action}")
    browser.get(f"/environments/{env_id}/actions/explode", status=404)
    assert "deploy" in browser.get("/deployments")
    assert "Delete environment" in browser.get(f"/environments/{env_id}/delete")
    listing = browser.get("/")
    assert "env1" in listing and "success" in listing


def test_creating_an_environment_posts_and_redirects_with_a_message(browser):
    response = browser.post("/environments", {"name": "  staging  "})
    page = browser.follow(response)
    assert "Environment staging created." in page
    assert "Environment staging created." not in browser.get("/")  # shown once
    bad = browser.follow(browser.post("/environments", {"name": "   "}))
    assert "The environment name is not valid" in bad


def test_forms_need_the_token_of_the_dashboard(api, browser):
    browser.token()
    no_token = api.client.post("/dashboard/environments", data={"name": "x"},
                               follow_redirects=False, headers=OWN)
    assert no_token.status_code == 403 and "did not come from this dashboard" in no_token.text
    wrong = api.client.post("/dashboard/environments", data={"name": "x", "csrf_token": "y" * 43},
                            follow_redirects=False, headers=OWN)
    assert wrong.status_code == 403
    elsewhere = browser.post("/environments", {"name": "x"},
                             headers={"Origin": "http://evil.example"})
    assert elsewhere.status_code == 403 and "another site" in elsewhere.text
    same = browser.post("/environments", {"name": "x"}, headers={"Origin": "http://testserver"})
    assert same.status_code == 303
    as_json = api.client.post("/dashboard/environments", json={"name": "x"})
    assert as_json.status_code == 400
    assert [e["name"] for e in api.client.get("/environments").json()["environments"]] == ["x"]


# -- the service form ---------------------------------------------------------------------

def test_service_form_errors_are_shown_at_their_field(browser):
    env_id = create_env(browser)
    path = f"/environments/{env_id}/services/new"
    cases = [
        ({"port": "70000"}, "port", "must be a port number between 1 and 65535"),
        ({"port": "eighty"}, "port", "must be a whole number"),
        ({"name": ""}, "name", "must not be empty"),
        ({"units": "0"}, "units", "needs at least one unit"),
        ({"osImage.name": " "}, "osImage", "osImage.name: required"),
        ({"unitNamingPattern": "web_#"}, "unitNamingPattern", "may only contain"),
        ({"dependsOn": "0123abcd"}, "dependsOn", "'0123abcd' is not another service"),
    ]
    for change, field, message in cases:
        response = browser.post(path, site_form(**change))
        assert response.status_code == 400, (change, response.text)
        assert message in (field_error(response.text, field) or ""), (change, response.text)
    # the other values are kept
    kept = browser.post(path, site_form(port="0"))
    assert 'value="web#"' in kept.text and field_error(kept.text, "name") is None


def test_unit_settings_errors_point_at_the_unit_settings(browser):
    env_id = create_env(browser)
    response = browser.post(f"/environments/{env_id}/services/new", {
        "type": "activeDirectory", "name": "ad", "domain": "acme.local",
        "adminPassword": "Adm1n-Secret", "units": "2",
        "unit_settings": '[{"isMaster": false, "recoveryPassword": "Rec0very-Secret"}]'})
    assert response.status_code == 400
    assert "units[1].isMaster: required" in field_error(response.text, "unit_settings")
    assert "Adm1n-Secret" not in response.text and "Rec0very-Secret" not in response.text
    good = browser.post(f"/environments/{env_id}/services/new", {
        "type": "activeDirectory", "name": "ad", "domain": "acme.local",
        "adminPassword": "Adm1n-Secret", "units": "2",
        "unit_settings": '[{"isMaster": true, "recoveryPassword": "Rec0very-Secret"},'
                         ' {"isMaster": false, "recoveryPassword": "Rec0very-Secret"}]'})
    assert good.status_code == 303, good.text
    page = browser.follow(good)
    assert "added: <b>ad</b>" in page


def test_adding_and_editing_keeps_passwords_out_of_every_page(api, browser):
    env_id = create_env(browser)
    form = {"type": "webServer", "name": "front", "adminPassword": SECRET,
            "domain": "acme.loc", "units": "1"}
    # an error elsewhere: the typed password is not sent back
    failed = browser.post(f"/environments/{env_id}/services/new", {**form, "domain": "a..b"})
    assert failed.status_code == 400 and field_error(failed.text, "domain")
    added = browser.post(f"/environments/{env_id}/services/new", form)
    page = browser.follow(added)
    assert "Service front saved in the session" in page
    service_id = re.search(r'/services/([0-9a-f]+)/edit', page).group(1)
    edit = browser.get(f"/environments/{env_id}/services/{service_id}/edit")
    assert 'name="adminPassword" value="***"' in edit
    # saved back with "***": the stored password is kept
    renamed = browser.post(f"/environments/{env_id}/services/{service_id}/edit",
                           {**form, "name": "front2", "adminPassword": "***"})
    assert renamed.status_code == 303, renamed.text
    failed_edit = browser.post(f"/environments/{env_id}/services/{service_id}/edit",
                               {**form, "adminPassword": "N3w-Secret!", "units": "x"})
    assert failed_edit.status_code == 400 and "N3w-Secret!" not in failed_edit.text
    assert 'name="adminPassword" value="***"' in failed_edit.text
    assert "Session <code>" in browser.get(f"/environments/{env_id}")
    with api.store.sessions() as db:
        services = db.query(ConfigSession).filter_by(
            environment_id=env_id).one().description["services"]
    assert services[0]["name"] == "front2" and services[0]["adminPassword"] == SECRET
    browser.post(f"/environments/{env_id}/deploy")
    browser.get(f"/environments/{env_id}")
    browser.get("/")
    browser.get("/deployments")
    job_id = api.published.tasks[-1][1]
    browser.get(f"/environments/{env_id}/jobs/{job_id}")
    browser.get(f"/environments/{env_id}/live")
    assert all(SECRET not in page for page in browser.pages)


def test_removing_a_service_and_discarding_the_session(browser):
    env_id = create_env(browser)
    page = browser.follow(browser.post(f"/environments/{env_id}/services/new", site_form()))
    service_id = re.search(r'/services/([0-9a-f]+)/edit', page).group(1)
    removed = browser.follow(browser.post(f"/environments/{env_id}/services/{service_id}/delete"))
    assert "Service removed in the session" in removed and "No services" in removed
    discarded = browser.follow(browser.post(f"/environments/{env_id}/session/discard"))
    assert "Pending changes discarded." in discarded and "No pending changes" in discarded
    again = browser.follow(browser.post(f"/environments/{env_id}/session/discard"))
    assert "no pending changes to discard" in again


# -- deploying, jobs, actions -----------------------------------------------------------------

def test_deploy_shows_progress_live_until_the_job_ends(api, browser):
    env_id = create_env(browser)
    browser.post(f"/environments/{env_id}/services/new", site_form())
    page = browser.follow(browser.post(f"/environments/{env_id}/deploy",
                                       {"change_detection": "always"}))
    assert "Deployment started." in page and 'data-busy="true"' in page
    body, job_id = api.published.tasks[-1]
    assert body["job"]["parameters"] == {"change_detection": "always"}
    live = api.client.get(f"/dashboard/environments/{env_id}/live").json()
    assert live["busy"] is True and "deploying" in live["html"]
    job_live = api.client.get(f"/dashboard/environments/{env_id}/jobs/{job_id}/live").json()
    assert job_live["busy"] is True
    api.store.job_events.apply(contract.task_event_body(
        env_id, job_id, {"change_id": "01A", "status": "running", "target_name": "web1",
                         "operation": "Deploy", "log": ["step one", "step two"]}), "ev-1")
    job_live = api.client.get(f"/dashboard/environments/{env_id}/jobs/{job_id}/live").json()
    assert "step one\nstep two" in job_live["html"]
    assert re.search(r"started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", job_live["html"])
    # the units' node states move with the job's events
    unit_id = body["services"][0]["units"][0]["id"]
    api.store.job_events.apply(contract.task_events_body(
        env_id, job_id, [], {unit_id: {"state": "configuring", "local": "pending"}}), "ev-2")
    live = api.client.get(f"/dashboard/environments/{env_id}/live").json()
    assert "configuring" in live["html"]
    assert api.client.get("/dashboard/live").json()["busy"] is True
    finish(api)
    live = api.client.get(f"/dashboard/environments/{env_id}/live").json()
    assert live["busy"] is False and ">ready<" in live["html"]
    assert api.client.get("/dashboard/live").json()["busy"] is False


def test_a_second_deploy_while_busy_is_refused_with_a_message(api, browser):
    env_id = create_env(browser)
    browser.post(f"/environments/{env_id}/services/new", site_form())
    browser.post(f"/environments/{env_id}/deploy")
    again = browser.follow(browser.post(f"/environments/{env_id}/deploy", {"back": "list"}))
    assert "flash-error" in again and "is busy: job" in again and "(deploy) running" in again


def test_a_queued_job_is_shown_queued_with_why(api, browser):
    """Issue 29: a job waiting for its environment's lock shows so, and says where
    to read why."""
    env_id = create_env(browser)
    browser.post(f"/environments/{env_id}/services/new", site_form())
    browser.post(f"/environments/{env_id}/deploy")
    job_id = api.published.tasks[-1][1]
    api.store.job_events.apply(contract.job_event_body(
        env_id, job_id, "queued", f"environment {env_id} is locked by job j0"), "q-1")
    page = browser.get(f"/environments/{env_id}")
    assert re.search(r"is queued since [^<]*\(waiting for the environment's lock", page), page
    job_page = browser.get(f"/environments/{env_id}/jobs/{job_id}")
    assert 'class="badge b-queued">queued<' in job_page
    assert f"environment {env_id} is locked by job j0" in job_page
    api.store.job_events.apply(contract.job_event_body(env_id, job_id, "running"), "r-1")
    assert "is running since" in browser.get(f"/environments/{env_id}")


def test_abandon_ends_the_running_job(api, browser):
    env_id = create_env(browser)
    browser.post(f"/environments/{env_id}/services/new", site_form())
    browser.post(f"/environments/{env_id}/deploy")
    page = browser.follow(browser.post(f"/environments/{env_id}/abandon"))
    assert "The running job was abandoned." in page and 'class="badge b-abandoned"' in page
    assert "Session <code>" in page and 'id="deploy-button"' in page  # deployable again
    nothing = browser.follow(browser.post(f"/environments/{env_id}/abandon"))
    assert "runs no job" in nothing


def test_actions_run_with_their_parameters_and_errors_at_the_field(api, browser):
    env_id = deployed_env(api, browser)
    heal = browser.post(f"/environments/{env_id}/actions/heal", {"node_instance_id": ""})
    assert heal.status_code == 400
    assert "is required" in field_error(heal.text, "node_instance_id")
    scale = browser.get(f"/environments/{env_id}/actions/scale")
    service_id = re.search(r'<option value="([0-9a-f]+)"', scale).group(1)
    too_far = browser.post(f"/environments/{env_id}/actions/scale",
                           {"node_id": service_id, "delta": "-5", "scale_compute": "true"})
    assert too_far.status_code == 400
    assert "would leave service" in field_error(too_far.text, "delta")
    kwargs = browser.post(f"/environments/{env_id}/actions/execute_operation",
                          {"operation": "check", "operation_kwargs": "{nope"})
    assert "is not valid JSON" in field_error(kwargs.text, "operation_kwargs")
    started = browser.post(f"/environments/{env_id}/actions/scale",
                           {"node_id": service_id, "delta": "1", "scale_compute": "true"})
    job_page = browser.follow(started)
    assert "Job scale started." in job_page and 'data-busy="true"' in job_page
    body, _ = api.published.tasks[-1]
    assert body["job"]["action"] == "scale"
    assert body["job"]["parameters"] == {"node_id": service_id, "delta": 1,
                                         "scale_compute": True}
    busy = browser.post(f"/environments/{env_id}/actions/check")
    assert busy.status_code == 409 and "is busy" in busy.text


def test_actions_need_a_deployed_environment(browser):
    env_id = create_env(browser)
    refused = browser.post(f"/environments/{env_id}/actions/check")
    assert refused.status_code == 409 and "has never been deployed" in refused.text


def test_deleting_an_environment(api, browser):
    fresh = create_env(browser, "fresh")
    page = browser.follow(browser.post(f"/environments/{fresh}/delete"))
    assert "Environment deleted (it was never deployed)." in page   # at once: no job
    assert api.client.get(f"/environments/{fresh}").status_code == 404
    deployed = deployed_env(api, browser)
    page = browser.follow(browser.post(f"/environments/{deployed}/delete"))
    assert "deleting" in page and "Environment deletion started." in page
    body, job_id = api.published.tasks[-1]
    assert body["job"]["action"] == "delete"
    # busy: the delete page says why deleting is refused, links the job and
    # offers no button that would be refused; forgetting stays offered
    confirm = browser.get(f"/environments/{deployed}/delete")
    assert re.search(r'<button [^>]*id="confirm-delete" disabled', confirm), confirm
    assert 'type="submit" id="confirm-delete"' not in confirm
    reason = re.search(r'id="busy-reason">(.*?)</div>', confirm, re.S).group(1)
    assert f'href="/dashboard/environments/{deployed}/jobs/{job_id}"' in reason
    assert re.search(r">delete</a> is running since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC",
                     reason), reason
    assert 'name="abandon" value="true"' in confirm
    forgotten = browser.follow(browser.post(f"/environments/{deployed}/delete",
                                            {"abandon": "true"}))
    assert "removed without tearing it down" in forgotten
    assert "No environments yet" in forgotten


def test_tenants_see_only_their_environments(api, browser):
    env_id = create_env(browser)
    login = browser.post("/login", {"tenant": "other", "user": "bob", "next": "/dashboard/"})
    assert login.status_code == 303 and login.headers["location"] == "/dashboard/"
    assert "tenant <b>other</b>" in browser.get("/")
    assert "No environments yet" in browser.get("/")
    refused = browser.get(f"/environments/{env_id}", status=403)
    assert "not authorized" in refused
    gone = api.client.get(f"/dashboard/environments/{env_id}/live")
    assert gone.status_code == 403 and gone.json()["error"]["code"] == 403
    browser.post("/logout")
    assert "tenant <b>t1</b>" in browser.get("/")  # back to the noauth defaults


def test_noauth_login_refuses_unusable_identities(browser):
    refused = browser.post("/login", {"tenant": "x" * 70, "user": "bob"})
    assert refused.status_code == 401 and "X-Tenant-Id must be at most" in refused.text
    empty = browser.post("/login", {"tenant": "", "user": "bob"})
    assert empty.status_code == 401
    elsewhere = browser.post("/login", {"tenant": "a", "user": "b",
                                        "next": "https://evil.example/"})
    assert elsewhere.headers["location"] == "/dashboard/"


# -- the topology graph -----------------------------------------------------------------------

def test_the_topology_graph_has_levels_edges_and_units():
    view = {"nodes": [{"id": "a", "kind": "service", "name": "dc", "type": "activeDirectory"},
                      {"id": "u1", "kind": "unit", "name": "dc_1", "service": "a",
                       "hostname": "dc1"},
                      {"id": "b", "kind": "service", "name": "<web>", "type": "webServer"}],
            "edges": [{"source": "b", "target": "a", "kind": "depends_on", "reason": "domain"},
                      {"source": "u1", "target": "a", "kind": "contained_in",
                       "reason": "unit"}],
            "levels": [["a"], ["b"]], "problems": []}
    svg = str(graph.render(view, {"a": {"local": "ok", "state": "started"}}))
    assert svg.startswith('<svg class="topology"')
    assert svg.count('class="edge"') == 1 and 'marker-end="url(#arrow)"' in svg
    assert "&lt;web&gt;" in svg and "<web>" not in svg
    assert 'class="node service st-ok"' in svg and 'class="node unit st-unknown"' in svg
    assert "dc1" in svg
    assert "No services" in str(graph.render({"nodes": [], "edges": [], "levels": []}, {}))
