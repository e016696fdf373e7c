"""The dashboard's lists, confirmations, task summaries and outputs (in process).

* jobs are split into deployments and other actions, on the environment's
  page and on the deployments page;
* the environments and jobs lists page and filter with query parameters;
* removing a service, scaling in, healing and uninstalling ask first, on a
  page whose form posts the same values again (no script needed);
* task summaries read as text, also those an older conductor wrote as a
  Python repr;
* the environment page has an outputs panel with the services' and units'
  URLs as links.
"""
from __future__ import annotations

import html
import re
from typing import Any, Callable

from fornace.api.dashboard import listing, views
from fornace.common import contract
from test_dashboard import (Browser, create_env, deployed_env, finish,  # noqa: F401
                            site_form)
from test_dashboard import api, browser  # noqa: F401 -- the fixtures


def finish_with(api, change: Callable[[dict[str, Any]], None]) -> None:
    """End the last job with its model changed as a conductor would have."""
    body, message_id = api.published.tasks[-1]
    model = {k: v for k, v in body.items() if k not in ("token", "tenant_id", "job")}
    change(model)
    api.store.results.apply(contract.result_body(model), message_id)


def region(page: str, element_id: str) -> str:
    """The HTML of the element with ``element_id`` up to its closing tag."""
    found = re.search(rf'<(\w+)[^>]* id="{element_id}"[^>]*>(.*?)</\1>', page, re.S)
    assert found, f"no element #{element_id}"
    return found.group(2)


def text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def run_check(api, browser: Browser, env_id: str) -> str:
    started = browser.post(f"/environments/{env_id}/actions/check")
    assert started.status_code == 303, started.text
    job_id = api.published.tasks[-1][1]
    finish(api)
    return job_id


# -- deployments and other actions ----------------------------------------------------------

def test_jobs_are_split_into_deployments_and_other_actions(api, browser):
    env_id = deployed_env(api, browser)
    run_check(api, browser, env_id)
    page = browser.get(f"/environments/{env_id}")
    deployments, others = region(page, "jobs"), region(page, "action-jobs")
    assert 'data-action="deploy"' in deployments and 'data-action="check"' not in deployments
    assert 'data-action="check"' in others and 'data-action="deploy"' not in others
    listed = browser.get("/deployments")
    assert 'data-action="deploy"' in listed and 'data-action="check"' not in listed
    actions = browser.get("/deployments?kind=actions")
    assert 'data-action="check"' in actions and 'data-action="deploy"' not in actions
    both = browser.get("/deployments?kind=all")
    assert 'data-action="check"' in both and 'data-action="deploy"' in both
    # the tabs count each kind
    assert re.search(r'data-kind="deployments">Deployments <span class="count">1<', listed)
    assert re.search(r'data-kind="actions">Other actions <span class="count">1<', listed)
    # the environment list's last deployment is the deploy, not the later check
    row = region(browser.get("/"), "environments")
    assert f"/jobs/{api.published.tasks[-2][1]}" in row
    job_page = browser.get(f"/environments/{env_id}/jobs/{api.published.tasks[-1][1]}")
    assert "Action <code>check</code>" in job_page
    assert views.job_kind("plan") == "actions" and views.job_kind("uninstall") == "deployments"


def test_the_jobs_list_filters_and_pages_on_the_server(api, browser):
    env_id = deployed_env(api, browser)
    other = create_env(browser, "second")
    assert browser.post(f"/environments/{other}/services/new",
                        site_form(name="s2")).status_code == 303
    browser.post(f"/environments/{other}/deploy")
    finish(api)
    for _ in range(3):
        run_check(api, browser, env_id)
    one_env = browser.get(f"/deployments?kind=actions&env={env_id}&per_page=2")
    assert one_env.count('data-action="check"') == 2
    assert "1–2 of 3 jobs" in text(one_env) and "page 1 of 2" in one_env
    following = re.search(r'rel="next" href="/dashboard/deployments(\?[^"]*)"', one_env).group(1)
    assert "env=" in following and "kind=actions" in following
    second = browser.get("/deployments" + html.unescape(following))
    assert second.count('data-action="check"') == 1 and "3–3 of 3 jobs" in text(second)
    past = browser.get(f"/deployments?kind=actions&env={env_id}&per_page=2&page=99")
    assert "page 2 of 2" in past                         # past the end: the last page
    named = browser.get("/deployments?kind=all&q=SECOND")
    assert named.count("<tr data-action=") == 1 and ">second</a>" in named
    state = browser.get("/deployments?kind=all&state=success")
    assert state.count("<tr data-action=") == 5
    assert "No job matches the filter" in browser.get("/deployments?state=abandoned")
    assert "Every environment" in one_env
    browser.get("/deployments?env=0123456789abcdef", status=404)


def test_the_environment_list_filters_and_pages_on_the_server(api, browser):
    for name in ("alpha", "beta", "gamma", "alphabet", "delta"):
        create_env(browser, name)
    page = browser.get("/?per_page=2")
    assert re.findall(r'<tr data-env="[0-9a-f]+">\s*<td><a [^>]+>(\w+)<', page) == [
        "alpha", "alphabet"]
    assert "1–2 of 5 environments" in text(page)
    last = browser.get("/?per_page=2&page=3")
    assert re.findall(r'<tr data-env="[0-9a-f]+">\s*<td><a [^>]+>(\w+)<', last) == ["gamma"]
    found = browser.get("/?q=ALPHA")
    assert re.findall(r'<tr data-env="[0-9a-f]+">\s*<td><a [^>]+>(\w+)<', found) == [
        "alpha", "alphabet"]
    assert 'value="ALPHA"' in found                    # the filter shows what was typed
    assert 'data-live-url="/dashboard/live?q=ALPHA"' in found
    live = api.client.get("/dashboard/live?q=ALPHA").json()
    assert "alphabet" in live["html"] and "gamma" not in live["html"]
    none = browser.get("/?status=deploying")
    assert "No environment matches the filter" in none
    # never deployed: the list shows (and filters) them as new, not ready
    new = browser.get("/?status=new&q=a")
    assert new.count("<tr data-env=") == 5
    assert '<option value="new" selected>new — not deployed</option>' in new
    assert "No environment matches the filter" in browser.get("/?status=ready")
    assert browser.get("/?page=nope&per_page=-3").count("<tr data-env=") == 5


def test_listing_pages_and_links():
    items = list(range(45))
    page = listing.paginate(items, "3", None, {"q": "x", "state": ""})
    assert page.items == list(range(40, 45)) and (page.first, page.last) == (41, 45)
    assert page.pages == 3 and page.link(2) == "?q=x&page=2" and page.link(1) == "?q=x"
    assert page.link(1, q="") == ""
    assert listing.paginate([], None, "500", {}).per_page == listing.MAX_PER_PAGE
    assert listing.paginate(items, "0", "10", {}).page == 1


# -- confirmations ------------------------------------------------------------------------------

def test_removing_a_service_is_confirmed_on_a_page_naming_what_goes(api, browser):
    env_id = deployed_env(api, browser)
    page = browser.get(f"/environments/{env_id}")
    service_id = re.search(r'/services/([0-9a-f]+)/edit', page).group(1)
    assert f'action="/dashboard/environments/{env_id}/services/{service_id}/delete"' not in page
    dependent = browser.post(f"/environments/{env_id}/services/new",
                             {**site_form(name="front"), "dependsOn": service_id})
    assert dependent.status_code == 303, dependent.text
    confirm = browser.get(f"/environments/{env_id}/services/{service_id}/delete")
    assert "Remove service site?" in confirm
    assert "site_instance_0, site_instance_1" in confirm
    assert "deletes its instances" in confirm                 # it is deployed
    assert "Depending on it: front" in text(confirm)
    assert f'action="/dashboard/environments/{env_id}/services/{service_id}/delete"' in confirm
    assert 'name="csrf_token"' in confirm
    removed = browser.follow(browser.post(f"/environments/{env_id}/services/{service_id}/delete"))
    assert "Service removed in the session" in removed and "removed: <b>site</b>" in removed
    browser.get(f"/environments/{env_id}/services/0123456789abcdef/delete", status=404)


def test_scaling_in_asks_first_and_posts_the_same_values_again(api, browser):
    env_id = deployed_env(api, browser)
    form = browser.get(f"/environments/{env_id}/actions/scale")
    service_id = re.search(r'<option value="([0-9a-f]+)"', form).group(1)
    jobs_before = len(api.published.tasks)
    asked = browser.post(f"/environments/{env_id}/actions/scale",
                         {"node_id": service_id, "delta": "-1", "scale_compute": "true"})
    assert asked.status_code == 200
    assert len(api.published.tasks) == jobs_before          # nothing ran yet
    confirmation = text(region(asked.text, "confirmation"))
    assert "Service site goes from 2 to 1 unit(s)" in confirmation
    assert "site_instance_1" in confirmation and "site_instance_0" not in confirmation
    hidden = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', asked.text))
    assert hidden["node_id"] == service_id and hidden["delta"] == "-1"
    assert hidden["scale_compute"] == "true" and hidden["confirmed"] == "yes"
    assert hidden["csrf_token"]
    done = browser.post(f"/environments/{env_id}/actions/scale",
                        {k: v for k, v in hidden.items() if k != "csrf_token"})
    assert done.status_code == 303, done.text
    body, _ = api.published.tasks[-1]
    assert body["job"]["parameters"] == {"node_id": service_id, "delta": -1,
                                         "scale_compute": True}
    finish(api)
    # a scale out needs no confirmation; a wrong scale in is an error at the field
    too_far = browser.post(f"/environments/{env_id}/actions/scale",
                           {"node_id": service_id, "delta": "-5", "scale_compute": "true"})
    assert too_far.status_code == 400 and 'id="confirmation"' not in too_far.text
    out = browser.post(f"/environments/{env_id}/actions/scale",
                       {"node_id": service_id, "delta": "1", "scale_compute": "true"})
    assert out.status_code == 303


def test_uninstall_and_heal_ask_first(api, browser):
    env_id = deployed_env(api, browser)
    jobs_before = len(api.published.tasks)
    asked = browser.post(f"/environments/{env_id}/actions/uninstall")
    assert asked.status_code == 200 and len(api.published.tasks) == jobs_before
    assert "Uninstall every service?" in asked.text
    assert "site (linuxWebServer): 2 unit(s)" in text(region(asked.text, "confirmation"))
    heal_form = browser.get(f"/environments/{env_id}/actions/heal")
    unit_id = re.findall(r'<option value="([0-9a-f]+)"', heal_form)[0]
    heal = browser.post(f"/environments/{env_id}/actions/heal", {"node_instance_id": unit_id})
    assert heal.status_code == 200 and "Rebuild unit site_instance_0" in heal.text
    confirmed = browser.post(f"/environments/{env_id}/actions/uninstall", {"confirmed": "yes"})
    assert confirmed.status_code == 303
    assert api.published.tasks[-1][0]["job"]["action"] == "uninstall"
    # check changes nothing: no confirmation
    finish(api)
    assert browser.post(f"/environments/{env_id}/actions/check").status_code == 303


# -- task summaries and long lines -----------------------------------------------------------------

def test_task_summaries_read_as_text_even_from_an_older_conductor(api, browser):
    env_id = create_env(browser)
    browser.post(f"/environments/{env_id}/services/new", site_form())
    browser.post(f"/environments/{env_id}/deploy")
    _, job_id = api.published.tasks[-1]
    long_path = "/srv/" + "/".join(f"folder-{n:03d}" for n in range(40)) + "/index.html"
    events = [
        {"change_id": "01A", "status": "ok", "target_name": "web1", "operation": "Deploy",
         "summary": "ok: ['serving http://127.0.0.5:8080/', 'site " + long_path + "']"},
        {"change_id": "01B", "status": "ok", "target_name": "web2", "operation": "Deploy",
         "summary": "ok: serving http://127.0.0.6:8080/", "log": [long_path]},
        {"change_id": "01C", "status": "ok", "target_name": "web2", "operation": "Check",
         "summary": 'ok: {"status":"ok"}'},
    ]
    for index, task in enumerate(events):
        api.store.job_events.apply(contract.task_event_body(env_id, job_id, task), f"ev-{index}")
    page = browser.get(f"/environments/{env_id}/jobs/{job_id}")
    summaries = [html.unescape(s).strip() for s in
                 re.findall(r'<td class="summary long">(.*?)</td>', page, re.S)]
    assert summaries == [f"ok: serving http://127.0.0.5:8080/; site {long_path}",
                         "ok: serving http://127.0.0.6:8080/", "ok"]   # a check's verdict: read
    assert "[&#39;" not in page and "['" not in page
    assert 'class="table wrap" id="tasks"' in page          # long lines wrap (CSS)
    css = api.client.get("/dashboard/static/dashboard.css").text
    assert re.search(r"\.table\.wrap td\.long[^{]*\{[^}]*overflow-wrap: anywhere", css)
    assert re.search(r"pre\.log \{[^}]*white-space: pre-wrap[^}]*overflow-wrap: anywhere", css)


def test_summary_text_turns_python_reprs_into_text():
    assert views.summary_text("ok: ['a', 'b']") == "ok: a; b"
    assert views.summary_text("ok: {'status': 'ok', 'n': None}") == \
        'ok: {"status": "ok", "n": null}'
    assert views.summary_text('ok: ["a"]') == 'ok: ["a"]'          # JSON: left as written
    assert views.summary_text("ok: [x] done") == "ok: [x] done"
    assert views.summary_text("failed: ['a',") == "failed: ['a',"
    assert views.summary_text(None) == "" and views.summary_text("ok") == "ok"


# -- outputs ---------------------------------------------------------------------------------

def test_the_environment_page_has_an_outputs_panel_with_links(api, browser):
    env_id = create_env(browser)
    farm = {"type": "linuxWebServerFarm", "name": "farm", "port": "8080",
            "loadBalancerPort": "8081", "units": "2", "osImage": "debian-12"}
    assert browser.post(f"/environments/{env_id}/services/new", farm).status_code == 303
    assert browser.post(f"/environments/{env_id}/services/new",
                        site_form(name="odd")).status_code == 303
    assert "Outputs" not in browser.get(f"/environments/{env_id}")   # nothing deployed
    browser.post(f"/environments/{env_id}/deploy")

    def serve(model: dict[str, Any]) -> None:
        farm_model, odd = model["services"]
        farm_model["state"] = {"address": "127.0.0.9", "url": "http://127.0.0.9:8081/"}
        for index, unit in enumerate(farm_model["units"]):
            unit["state"] = {"hostname": f"farm{index + 1}", "address": f"127.0.0.{index + 2}",
                             "url": f"http://127.0.0.{index + 2}:8080/"}
        odd["units"][0]["state"] = {"hostname": "odd1", "url": "javascript:alert(1)"}
    finish_with(api, serve)
    page = browser.get(f"/environments/{env_id}")
    panel = region(page, "outputs")
    assert '<a class="url" href="http://127.0.0.9:8081/"' in panel
    assert '<a class="url" href="http://127.0.0.3:8080/"' in panel
    assert "farm2" in panel and "127.0.0.3" in panel
    assert 'href="javascript' not in panel and "javascript:alert(1)" in panel  # shown, not linked
