"""Jobs through the API: actions, busy refusals, abandon, TSV, topology and
status views (job events, results and reports: test_store_jobevents,
test_store_results, test_store_reports) -- on SQLite and on the real PostgreSQL."""
from __future__ import annotations

import copy
import json
import threading

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from waiting import wait_for
from fornace.api.server import ApiService
from fornace.common.db.engine import alembic_config, make_engine, upgrade
from fornace.common.db.models import Job, JobLock as LockRow, new_id
from apikit import make_api, reset_postgres, web_server
from fornace.cli.main import build_conf
from fornace.common import contract
from fornace.common.broker import Broker
from fornace.common.catalog import load_catalog
from fornace.conductor.jobs.lock import JobLock
from services import postgres_url

TYPES = {
    "service": {"abstract": True, "operations": {"restart": None}},
    "windowsService": {"extends": "service", "abstract": True,
                       "references": {"domain": {"type": "activeDirectory", "key": "domain"}}},
    "activeDirectory": {"extends": "windowsService"},
    "webServer": {"extends": "windowsService",
                  "operations": {"recycle": {"template": "RecyclePool"}}},
    "linuxService": {"extends": "service", "abstract": True},
    "linuxWebServer": {"extends": "linuxService"},
}


def _api(backend: str, tmp_path):
    path = tmp_path / "types.json"
    path.write_text(json.dumps({"types": TYPES}))
    catalog = load_catalog(path)
    if backend == "sqlite":
        yield make_api(f"sqlite:///{tmp_path / 'jobs.sqlite'}", catalog=catalog)
        return
    url = postgres_url()
    reset_postgres(url)
    yield make_api(url, catalog=catalog)
    reset_postgres(url)


@pytest.fixture(params=["sqlite", "postgres"])
def api(request, tmp_path):
    yield from _api(request.param, tmp_path)


@pytest.fixture
def postgres_api(tmp_path):
    """Races need PostgreSQL: SQLite serialises writers."""
    yield from _api("postgres", tmp_path)


def linux_site(name="site", **extra):
    return {"name": name, "type": "linuxWebServer", "osImage": {"name": "debian"},
            "units": [{}, {}], **extra}


def new_env(client, services=(), name=None):
    """An environment and an open session holding ``services`` (names are unique
    in a tenant: without ``name``, one no other environment has)."""
    response = client.post("/environments", json={"name": name or f"env-{new_id()}"})
    assert response.status_code == 200, response.text
    env = response.json()
    session = client.post(f"/environments/{env['id']}/configure").json()["id"]
    for service in services:
        response = client.post(f"/environments/{env['id']}/services/", json=service,
                               headers={"X-Configuration-Session": session})
        assert response.status_code == 200, response.text
    return env["id"], session


def finish(api, message_id, model, reports=()):
    env_id = model["id"]
    for index, (level, text) in enumerate(reports):
        api.store.reports.add(contract.report_body(env_id, "environment", text, level, env_id),
                              f"{message_id}-report-{index + 1}")
    api.store.results.apply(contract.result_body(model), message_id)


def deployed(api, services=None, change=None):
    """A deployed environment; ``change(model)`` edits the final model first."""
    env_id, session = new_env(api.client, [web_server(), linux_site()] if services is None
                              else services)
    assert api.client.post(f"/environments/{env_id}/sessions/{session}/deploy").status_code \
        == 200
    body, message_id = api.published.tasks[-1]
    model = copy.deepcopy(body)
    if change:
        change(model)
    finish(api, message_id, model)
    return env_id, model


def action(api, env_id, name, parameters=None, **kwargs):
    if parameters is not None:
        kwargs["json"] = parameters
    return api.client.post(f"/environments/{env_id}/actions/{name}", **kwargs)


def service_id(model, name):
    return next(s["id"] for s in model["services"] if s["name"] == name)


def message(response):
    return response.json()["error"]["message"]


def event(api, env_id, job_id, change_id, message_id=None, **task):
    api.store.job_events.apply(contract.task_event_body(env_id, job_id,
                                                        {"change_id": change_id, **task}),
                               message_id)


# -- starting jobs -----------------------------------------------------------------------

def test_an_action_creates_a_job_and_publishes_its_task(api):
    env_id, model = deployed(api)
    web = service_id(model, "frontend")
    response = action(api, env_id, "scale", {"node_id": web},
                      headers={"X-Auth-Token": "tok-9"})
    assert response.status_code == 202, response.text
    job = response.json()
    assert (job["action"], job["state"], job["environment_id"]) == ("scale", "running", env_id)
    assert job["parameters"] == {"node_id": web, "delta": 1, "scale_compute": True}
    body, message_id = api.published.tasks[-1]
    assert message_id == job["id"]
    task = contract.parse_task(body)
    assert (task.job_id, task.action, task.parameters) == (job["id"], "scale",
                                                           job["parameters"])
    assert (task.token, task.tenant_id, task.environment_id) == ("tok-9", "t1", env_id)
    assert task.model["services"][0]["adminPassword"] == "P@ssw0rd-web"  # the conductor's
    shown = api.client.get(f"/environments/{env_id}").json()
    assert (shown["status"], shown["version"]) == ("deploying", 1)
    jobs = api.client.get(f"/environments/{env_id}/jobs").json()["jobs"]
    assert [(j["id"], j["action"]) for j in jobs][0] == (job["id"], "scale")
    assert [j["action"] for j in jobs] == ["scale", "deploy"]
    assert "P@ssw0rd-web" not in json.dumps(
        api.client.get(f"/environments/{env_id}/deployments").json())


def test_an_action_without_a_body_takes_the_defaults(api):
    env_id, _ = deployed(api)
    response = api.client.post(f"/environments/{env_id}/actions/install")
    assert response.status_code == 202, response.text
    assert response.json()["parameters"] == {"change_detection": "evaluate"}
    assert contract.parse_task(api.published.tasks[-1][0]).action == "install"


def test_uninstall_keeps_the_environment_and_marks_it_deploying(api):
    env_id, model = deployed(api)
    job = action(api, env_id, "uninstall", {}).json()
    assert api.client.get(f"/environments/{env_id}").json()["status"] == "deploying"
    emptied = dict(model, services=[])
    finish(api, job["id"], emptied)
    shown = api.client.get(f"/environments/{env_id}").json()
    assert (shown["status"], shown["version"], shown["services"]) == ("ready", 2, [])


def test_execute_operation_secrets_of_parameters_are_masked_in_views(api):
    env_id, model = deployed(api)
    response = action(api, env_id, "execute_operation", {
        "operation": "recycle", "type_names": ["webServer"],
        "operation_kwargs": {"adminPassword": "Kw-Secret-1"}})
    assert response.status_code == 202, response.text
    assert response.json()["parameters"]["operation_kwargs"] == {"adminPassword": "***"}
    body, _ = api.published.tasks[-1]
    assert body["job"]["parameters"]["operation_kwargs"] == {"adminPassword": "Kw-Secret-1"}
    listed = api.client.get(f"/environments/{env_id}/jobs").text
    assert "Kw-Secret-1" not in listed


def test_secret_action_parameters_never_come_back_in_any_job_view(api):
    env_id, model = deployed(api)
    env_secret = model["services"][0]["adminPassword"]      # stored in the environment
    response = action(api, env_id, "execute_operation", {
        "operation": "recycle", "type_names": ["webServer"],
        "operation_kwargs": {"dbPassword": "Kw-Secret-7", "nested": [{"token": "Tok-Secret-8"}],
                             "note": f"same as {env_secret}"}})
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    body, message_id = api.published.tasks[-1]
    assert body["job"]["parameters"]["operation_kwargs"]["dbPassword"] == "Kw-Secret-7"
    event(api, env_id, job_id, "T001", status="ok", summary="recycled")
    finish(api, message_id, model)
    # a row written by another writer (or before masking): masked on the way out too
    with api.store.sessions.begin() as db:
        row = db.get(Job, job_id)
        kwargs = {**row.parameters["operation_kwargs"], "apiPassword": "Raw-Secret-9"}
        row.parameters = {**row.parameters, "operation_kwargs": kwargs}
    views = [response.text] + [api.client.get(path).text for path in (
        f"/environments/{env_id}/jobs", f"/environments/{env_id}/jobs/{job_id}",
        f"/environments/{env_id}/jobs/{job_id}/tasks.tsv", f"/environments/{env_id}/tasks.tsv",
        f"/environments/{env_id}/status", f"/environments/{env_id}/deployments",
        f"/environments/{env_id}/deployments/{job_id}", "/deployments")]
    for view in views:
        for secret in ("Kw-Secret-7", "Tok-Secret-8", "Raw-Secret-9", env_secret):
            assert secret not in view
    shown = api.client.get(f"/environments/{env_id}/jobs/{job_id}").json()
    assert shown["parameters"]["operation_kwargs"] == {
        "dbPassword": "***", "nested": [{"token": "***"}], "note": "same as ***",
        "apiPassword": "***"}


def test_session_deploy_and_delete_send_job_sections(api):
    env_id, session = new_env(api.client, [web_server()])
    base = f"/environments/{env_id}/sessions/{session}/deploy"
    bad = api.client.post(base, params={"change_detection": "often"})
    assert bad.status_code == 400 and "'change_detection'" in message(bad)
    assert api.published.tasks == []
    assert api.client.post(base, params={"change_detection": "always"}).status_code == 200
    body, message_id = api.published.tasks[-1]
    assert body["job"] == {"id": message_id, "action": "deploy",
                           "parameters": {"change_detection": "always"}}
    finish(api, message_id, copy.deepcopy(body))
    assert api.client.delete(f"/environments/{env_id}").status_code == 200
    body, message_id = api.published.tasks[-1]
    assert body["job"] == {"id": message_id, "action": "delete", "parameters": {}}
    jobs = api.client.get(f"/environments/{env_id}/jobs").json()["jobs"]
    assert [(j["action"], j["parameters"]) for j in jobs] == [
        ("delete", {}), ("deploy", {"change_detection": "always"})]


# -- refusals -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["explode", "deploy", "delete"])
def test_unknown_actions_are_404_naming_the_known_ones(api, name):
    env_id, _ = deployed(api)
    response = action(api, env_id, name, {})
    assert response.status_code == 404
    assert f"unknown action {name!r}" in message(response)
    assert "install, uninstall, execute_operation, heal, scale, check, plan" in message(response)


@pytest.mark.parametrize("name, parameters, expected", [
    ("scale", {}, "'node_id' is required"),
    ("scale", {"node_id": "nope"}, "'node_id' names no service"),
    ("scale", {"node_id": "FRONTEND", "delta": -1}, "must keep at least 1"),
    ("heal", {"node_instance_id": "nope"}, "'node_instance_id' names no unit"),
    ("install", {"change_detection": 1}, "'change_detection' must be one of"),
    ("check", {"deep": True}, "unknown parameter 'deep'"),
    ("execute_operation", {"operation": "recycle"},
     "'linuxWebServer' has no operation 'recycle'"),
    ("execute_operation", {"operation": "recycle", "type_names": ["teapot"]},
     "'type_names' names no service type"),
])
def test_bad_parameters_are_400_naming_the_parameter(api, name, parameters, expected):
    env_id, model = deployed(api)
    if parameters.get("node_id") == "FRONTEND":
        parameters = dict(parameters, node_id=service_id(model, "frontend"))
    count = len(api.published.tasks)
    response = action(api, env_id, name, parameters)
    assert response.status_code == 400, response.text
    assert expected in message(response)
    assert len(api.published.tasks) == count
    assert api.client.get(f"/environments/{env_id}").json()["status"] == "ready"


@pytest.mark.parametrize("content, expected", [
    (b"{nope", "malformed JSON body"),
    (b"[1, 2]", "must be a JSON object"),
    (b'"scale"', "must be a JSON object"),
])
def test_bodies_that_are_not_parameter_objects_are_400(api, content, expected):
    env_id, _ = deployed(api)
    response = api.client.post(f"/environments/{env_id}/actions/check", content=content,
                               headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and expected in message(response)


def test_actions_need_a_deployed_environment_except_plan(api):
    env_id, _ = new_env(api.client, [web_server()])
    response = action(api, env_id, "check", {})
    assert response.status_code == 409
    assert message(response) == (f"environment {env_id} has never been deployed: deploy it "
                                 f"before running check")
    planned = action(api, env_id, "plan", {})
    assert planned.status_code == 202, planned.text


def test_missing_and_foreign_environments(api):
    assert action(api, "nope", "check", {}).status_code == 404
    env_id, _ = deployed(api)
    other = api.as_tenant("t2", "u2")
    assert action(api, env_id, "check", {}, headers=other).status_code == 403
    for path in ("jobs", "tasks.tsv", "topology", "status"):
        assert api.client.get(f"/environments/{env_id}/{path}",
                              headers=other).status_code == 403, path
    assert api.client.post(f"/environments/{env_id}/abandon", headers=other).status_code == 403


def test_a_busy_environment_refuses_a_job_naming_the_running_one(api):
    env_id, _ = deployed(api)
    first = action(api, env_id, "check", {}).json()
    count = len(api.published.tasks)
    response = action(api, env_id, "install", {})
    assert response.status_code == 409
    name = api.client.get(f"/environments/{env_id}").json()["name"]
    assert message(response) == (
        f"environment {name} is busy: job {first['id']} (check) running since "
        f"{first['started']}Z; wait for it to end or abandon it")
    assert response.json()["error"]["job"] == {"id": first["id"], "kind": "check",
                                               "started": f"{first['started']}Z"}
    assert len(api.published.tasks) == count  # refused, not queued
    finish(api, first["id"], copy.deepcopy(api.published.tasks[-1][0]))
    assert action(api, env_id, "install", {}).status_code == 202


def test_a_session_deploy_in_progress_makes_actions_wait(api):
    env_id, _ = deployed(api)
    session = api.client.post(f"/environments/{env_id}/configure").json()["id"]
    api.client.post(f"/environments/{env_id}/sessions/{session}/deploy")
    job_id = api.published.tasks[-1][1]
    response = action(api, env_id, "check", {})
    assert response.status_code == 409 and f"job {job_id} (deploy)" in message(response)


def test_the_broker_down_leaves_no_job(api):
    env_id, _ = deployed(api)
    api.published.fail = True
    assert action(api, env_id, "check", {}).status_code == 503
    api.published.fail = False
    assert [j["action"] for j in api.client.get(
        f"/environments/{env_id}/jobs").json()["jobs"]] == ["deploy"]
    assert api.client.get(f"/environments/{env_id}").json()["status"] == "ready"


# -- abandon ------------------------------------------------------------------------------

def test_abandon_ends_the_running_job_and_ignores_what_it_sends_later(api):
    env_id, model = deployed(api)
    assert api.client.post(f"/environments/{env_id}/abandon").status_code == 409
    job = action(api, env_id, "check", {}).json()
    lock = JobLock(api.store.sessions.kw["bind"])
    grant = lock.acquire(env_id, job["id"], "conductor-1")
    response = api.client.post(f"/environments/{env_id}/abandon")
    assert response.status_code == 200, response.text
    assert (response.json()["id"], response.json()["state"]) == (job["id"], "abandoned")
    assert response.json()["finished"]
    assert lock.holder(env_id) is None
    # revoked, not deleted: the job's conductor finds it lost, the token went up
    assert not lock.heartbeat(grant) and lock.token(env_id) == grant.token + 1
    # an abandoned check deployed nothing: the environment is as its deployment left it
    assert api.client.get(f"/environments/{env_id}").json()["status"] == "ready"
    assert api.client.post(f"/environments/{env_id}/abandon").status_code == 409
    # what the abandoned job still sends changes nothing
    late = copy.deepcopy(model)
    late["services"] = []
    finish(api, job["id"], late, [("error", "late failure")])
    api.store.job_events.apply(contract.job_event_body(env_id, job["id"], "refused", "x"), "e1")
    event(api, env_id, job["id"], "c1", status="ok")  # its task rows may still be stored
    shown = api.client.get(f"/environments/{env_id}").json()
    assert (shown["version"], len(shown["services"]), shown["status"]) == (1, 2, "ready")
    done = api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()
    assert done["state"] == "abandoned" and [t["status"] for t in done["tasks"]] == ["ok"]
    reports = api.client.get(f"/environments/{env_id}/deployments/{job['id']}").json()
    assert [r["level"] for r in reports["reports"]] == ["warning"]  # the abandon, no late error
    assert action(api, env_id, "check", {}).status_code == 202  # usable again


def test_abandoning_a_session_deploy_reopens_the_session(api):
    env_id, session = new_env(api.client, [web_server()])
    api.client.post(f"/environments/{env_id}/sessions/{session}/deploy")
    assert api.client.post(f"/environments/{env_id}/abandon").status_code == 200
    assert api.client.get(f"/environments/{env_id}/sessions/{session}").json()["state"] == \
        "open"
    assert api.client.post(f"/environments/{env_id}/sessions/{session}/deploy").status_code \
        == 200


# -- TSV --------------------------------------------------------------------------------------

def test_tasks_as_tsv(api):
    env_id, _ = deployed(api)
    deploy_job = api.client.get(f"/environments/{env_id}/jobs").json()["jobs"][0]["id"]
    event(api, env_id, deploy_job, "C001", target="u1", target_name="web1",
          operation="create", reason="new", status="ok", started="2024-05-01T12:00:00",
          finished="2024-05-01T12:01:00", summary="created\tweb1\nfine \\ ok")
    job = action(api, env_id, "check", {}).json()
    event(api, env_id, job["id"], "C002", status="error", summary=None)
    response = api.client.get(f"/environments/{env_id}/jobs/{job['id']}/tasks.tsv")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/tab-separated-values")
    header = ("change_id\tjob_id\taction\tstatus\treason\ttarget\ttarget_name\toperation\t"
              "started\tfinished\tsummary")
    assert response.text == f"{header}\nC002\t{job['id']}\tcheck\terror\t\t\t\t\t\t\t\n"
    everything = api.client.get(f"/environments/{env_id}/tasks.tsv").text.split("\n")
    assert everything[0] == header and everything[-1] == ""
    assert everything[1] == (f"C001\t{deploy_job}\tdeploy\tok\tnew\tu1\tweb1\tcreate\t"
                             f"2024-05-01T12:00:00\t2024-05-01T12:01:00\t"
                             f"created\\tweb1\\nfine \\\\ ok")
    assert everything[2].startswith("C002\t") and len(everything) == 4
    assert api.client.get(f"/environments/{env_id}/jobs/nope/tasks.tsv").status_code == 404


# -- topology and status --------------------------------------------------------------------

def test_topology_view(api):
    ad = {"name": "dc", "type": "activeDirectory", "domain": "acme.loc",
          "adminPassword": "P@ssw0rd-ad",
          "units": [{"isMaster": True, "recoveryPassword": "P@ssw0rd-rec"}]}
    env_id, model = deployed(api, [ad, web_server()])
    ad_id, web_id = service_id(model, "dc"), service_id(model, "frontend")
    view = api.client.get(f"/environments/{env_id}/topology").json()
    assert view["levels"] == [[ad_id], [web_id]]
    assert {"source": web_id, "target": ad_id, "kind": "depends_on",
            "reason": "domain"} in view["edges"]
    assert {(n["kind"], n["type"]) for n in view["nodes"]} >= {
        ("service", "activeDirectory"), ("service", "webServer"), ("unit", "host")}
    assert view["problems"] == []
    assert "P@ssw0rd" not in json.dumps(view)


def test_topology_of_a_session(api):
    env_id, session = new_env(api.client, [linux_site("a"), linux_site("b")])
    assert api.client.get(f"/environments/{env_id}/topology").json()["nodes"] == []
    view = api.client.get(f"/environments/{env_id}/topology",
                          headers={"X-Configuration-Session": session}).json()
    assert len(view["levels"]) == 1 and len(view["levels"][0]) == 2


def test_status_view(api):
    env_id, session = new_env(api.client, [linux_site()])
    assert api.client.get(f"/environments/{env_id}/status").json()["services"] == []
    before = api.client.get(f"/environments/{env_id}/status",
                            headers={"X-Configuration-Session": session}).json()
    assert before["job"] is None and before["version"] == 0
    unit = before["services"][0]["units"][0]
    assert unit["status"] == {"local": "pending", "state": "initial"}

    def statuses(model):
        service = model["services"][0]
        service["units"][0]["status"] = {"local": "ok", "state": "started",
                                         "lastChange": "A001", "created": "A001",
                                         "customized": False, "protected": True}
        service["status"] = {"local": "degraded", "state": "started"}

    api.client.post(f"/environments/{env_id}/sessions/{session}/deploy")
    running = api.client.get(f"/environments/{env_id}/status").json()
    assert running["job"] == api.published.tasks[-1][1]
    assert [u["status"]["local"] for u in running["services"][0]["units"]] == \
        ["pending", "pending"]  # the first deployment's services
    # and what reads the environment's services shows them, not the empty deployed model
    listed = api.client.get(f"/environments/{env_id}/services").json()
    assert [s["name"] for s in listed] == ["site"]
    assert api.client.get(f"/environments/{env_id}").json()["services"] == listed
    body, message_id = api.published.tasks[-1]
    model = copy.deepcopy(body)
    statuses(model)
    finish(api, message_id, model)
    after = api.client.get(f"/environments/{env_id}/status").json()
    service = after["services"][0]
    assert after["job"] is None and after["version"] == 1
    assert service["status"] == {"local": "degraded", "state": "started"}
    assert service["units"][0]["status"]["protected"] is True
    assert service["units"][0]["status"]["local"] == "ok"
    # the conductor's bookkeeping only when asked for
    assert "lastChange" not in service["units"][0]["status"]
    detailed = api.client.get(f"/environments/{env_id}/status?details=true").json()
    assert detailed["services"][0]["units"][0]["status"]["lastChange"] == "A001"
    assert service["units"][1]["status"] == {"local": "unknown", "state": "initial"}


def test_status_moves_with_the_node_states_a_running_job_sends(api):
    def started(model):
        for unit in model["services"][0]["units"]:
            unit["status"] = {"local": "ok", "state": "started"}
    env_id, model = deployed(api, [linux_site()], change=started)
    session = api.client.post(f"/environments/{env_id}/configure").json()["id"]
    api.client.post(f"/environments/{env_id}/services/", json=linux_site("blog"),
                    headers={"X-Configuration-Session": session})
    api.client.post(f"/environments/{env_id}/sessions/{session}/deploy")
    body, job_id = api.published.tasks[-1]
    site, blog = body["services"]
    # a job that has sent nothing yet: the services it works on, the new one pending
    running = api.client.get(f"/environments/{env_id}/status").json()
    assert running["job"] == job_id
    assert [s["name"] for s in running["services"]] == ["site", "blog"]
    assert {u["status"]["state"] for u in running["services"][1]["units"]} == {"initial"}
    creating, configuring = blog["units"][0]["id"], site["units"][0]["id"]
    api.store.job_events.apply(contract.task_events_body(
        env_id, job_id, [{"change_id": "N001", "status": "running"}],
        {creating: {"state": "creating", "local": "pending"}}), "nodes-1")
    assert api.client.get(f"/environments/{env_id}/outputs").json()["services"][1]["units"][0][
        "address"] is None
    api.store.job_events.apply(contract.task_events_body(
        env_id, job_id, [], {configuring: {"state": "configuring", "local": None},
                             creating: {"state": "created", "local": "pending",
                                        "hostname": "blog1", "address": "10.0.0.7"}}),
        "nodes-2")
    units = {u["id"]: u for s in api.client.get(
        f"/environments/{env_id}/status").json()["services"] for u in s["units"]}
    shown = {unit_id: unit["status"] for unit_id, unit in units.items()}
    assert shown[creating]["state"] == "created"
    # the endpoints the job sent show at once, in the status and the outputs (1.15)
    assert (units[creating]["hostname"], units[creating]["address"]) == ("blog1", "10.0.0.7")
    outputs = api.client.get(f"/environments/{env_id}/outputs").json()
    assert [s["name"] for s in outputs["services"]] == ["site", "blog"]
    assert outputs["services"][1]["units"][0]["address"] == "10.0.0.7"
    assert shown[configuring]["state"] == "configuring"
    assert shown[configuring]["local"] == "ok"   # not sent: the last known one stays
    # the result ends the job: its model is what is shown from then on
    final = copy.deepcopy(body)
    for service in final["services"]:
        for item in [service, *service["units"]]:
            item["status"] = {"local": "ok", "state": "started"}
    finish(api, job_id, final)
    after = api.client.get(f"/environments/{env_id}/status").json()
    assert after["job"] is None
    assert {u["status"]["state"] for s in after["services"] for u in s["units"]} == {"started"}


# -- the broker consumer and the schema --------------------------------------------------------

def test_the_api_service_consumes_job_events(tmp_path):
    conf = build_conf()
    conf(["api"], default_config_files=[])
    conf.set_override("url", "memory://", group="broker")
    service = ApiService(conf, f"sqlite:///{tmp_path / 'events.sqlite'}")
    broker = Broker("memory://")
    try:
        assert service.start_consumers().ready.wait(10)
        client = TestClient(service.app)
        env_id, session = new_env(client, [linux_site()])
        client.post(f"/environments/{env_id}/sessions/{session}/deploy")
        job_id = client.get(f"/environments/{env_id}/jobs").json()["jobs"][0]["id"]
        broker.publish(contract.JOB_EVENTS, {"kind": "garbage"}, "bad-1")
        broker.publish(contract.JOB_EVENTS, contract.task_event_body(
            env_id, job_id, {"change_id": "D001", "status": "running", "log": ["a"]}), "ev-1")
        broker.publish(contract.JOB_EVENTS, contract.task_event_body(
            env_id, job_id, {"change_id": "D001", "log": ["b"]}), "ev-2")
        tasks = wait_for(lambda: (lambda found: found if found and found[0]["log"] == ["a", "b"]
                                  else None)(
            client.get(f"/environments/{env_id}/jobs/{job_id}").json()["tasks"]),
            "both log lines to be stored")
        assert tasks[0]["status"] == "running"

        # as the conductor sends them: on the results queue, the last event before
        # the result -- the job ends with its task already finished
        broker.publish(contract.RESULTS, contract.task_event_body(
            env_id, job_id, {"change_id": "D001", "status": "ok", "log": ["c"]}), "ev-3")
        broker.publish(contract.RESULTS, {"id": env_id, "name": "e", "services": []}, job_id)
        job = wait_for(lambda: (lambda found: found if found["state"] != "running" else None)(
            client.get(f"/environments/{env_id}/jobs/{job_id}").json()), "the job to end")
        assert job["state"] == "success"
        assert (job["tasks"][0]["status"], job["tasks"][0]["log"]) == ("ok", ["a", "b", "c"])
    finally:
        service.stop()
        broker.close()


def test_the_results_queue_keeps_results_behind_their_job_events(tmp_path, monkeypatch):
    """A batch of the results queue: runs of job events stored together, each
    result alone, in their order; after a failure nothing later is tried."""
    from fornace.common.consumer import Delivery

    conf = build_conf()
    conf(["api"], default_config_files=[])
    conf.set_override("url", "memory://", group="broker")
    service = ApiService(conf, f"sqlite:///{tmp_path / 'order.sqlite'}")
    calls: list = []
    broken = RuntimeError("database down")
    failing: set = set()

    def apply_job_events(pairs):
        calls.append(("events", [m for _, m in pairs]))
        return [broken if m in failing else None for _, m in pairs]

    def apply_results(pairs):
        outcomes = []
        for body, message_id in pairs:
            calls.append(("result", message_id))
            outcomes.append(None if "id" in body else
                            contract.ContractError("result message: field 'id' is missing"))
        return outcomes

    monkeypatch.setattr(service.store.job_events, "apply_all", apply_job_events)
    monkeypatch.setattr(service.store.results, "apply_all", apply_results)

    def item(message_id, event=True):
        body = (contract.task_event_body("E", "J", {"change_id": message_id}) if event
                else {"id": "E"} if message_id.startswith("r") else {"no": "id"})
        return body, Delivery(message_id, contract.RESULTS)

    try:
        items = [item("e1"), item("e2"), item("r1", False), item("e3"), item("bad", False),
                 item("r2", False)]
        outcomes = service._on_results(items)
        assert [type(o).__name__ for o in outcomes] == [
            "NoneType", "NoneType", "NoneType", "NoneType", "ContractError", "NoneType"]
        assert calls == [("events", ["e1", "e2"]), ("result", "r1"), ("events", ["e3"]),
                         ("result", "bad"), ("result", "r2")]
        calls.clear()
        failing.add("e2")
        assert service._on_results(items) == [None, broken, broken, broken, broken, broken]
        assert calls == [("events", ["e1", "e2"])]          # r1 waits for e2, and so on
    finally:
        service.stop()


def test_upgrade_from_0001_keeps_deployments(tmp_path):
    from alembic import command
    from sqlalchemy import text

    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    command.upgrade(alembic_config(url), "0001")
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO environments VALUES ('e1', 'n', 't', 1, 'ready', '{}', "
                          "'2024-01-01 00:00:00', '2024-01-01 00:00:00')"))
        conn.execute(text("INSERT INTO deployments VALUES ('d1', 'e1', 't', NULL, 'deploy', "
                          "'success', '{}', '2024-01-01 00:00:00', NULL, "
                          "'2024-01-01 00:00:00', '2024-01-01 00:00:00')"))
    upgrade(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE deployments SET kind = 'execute_operation'"))
        row = conn.execute(select(Job.kind, Job.parameters)).one()
        assert tuple(row) == ("execute_operation", None)
        assert conn.execute(select(LockRow)).all() == []
    engine.dispose()


@pytest.mark.parametrize("attempt", range(3))
def test_concurrent_actions_on_postgres_exactly_one_runs(postgres_api, attempt):
    api = postgres_api
    env_id, _ = deployed(api)
    barrier = threading.Barrier(4)
    responses: list = []

    def start(name: str) -> None:
        barrier.wait()
        responses.append(action(api, env_id, name, {}))

    threads = [threading.Thread(target=start, args=(name,))
               for name in ("check", "install", "uninstall", "check")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    codes = sorted(r.status_code for r in responses)
    assert codes == [202, 409, 409, 409], [r.text for r in responses]
    winner = next(r.json() for r in responses if r.status_code == 202)
    for refused in (r for r in responses if r.status_code == 409):
        assert f"busy: job {winner['id']} ({winner['action']})" in message(refused)
    assert len(api.client.get(f"/environments/{env_id}/jobs").json()["jobs"]) == 2


def test_rows_a_job_left_open_are_closed_when_it_ends(api):
    """Regression: a dead conductor's task rows stayed 'running' for ever beside the
    rows of the conductor that finished the job, while the job said 'success'."""
    env_id, model = deployed(api)
    job = action(api, env_id, "check", {}).json()
    event(api, env_id, job["id"], "dead-run", target="u1", status="running")
    event(api, env_id, job["id"], "second-run", target="u1", status="ok")
    finish(api, job["id"], copy.deepcopy(model))
    tasks = {t["change_id"]: t for t in
             api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()["tasks"]}
    assert tasks["second-run"]["status"] == "ok"
    assert tasks["dead-run"]["status"] == "cancelled" and tasks["dead-run"]["finished"]
    assert "superseded" in tasks["dead-run"]["summary"]


def test_writes_of_a_run_that_lost_the_lock_are_dropped(api):
    """Regression: when a redelivered job was taken over, both conductors' task rows,
    reports and results were stored; now what carries an older lock token than the
    environment's is dropped (fencing)."""
    import datetime
    env_id, model = deployed(api)
    job = action(api, env_id, "check", {}).json()
    now = [datetime.datetime(2030, 1, 1)]
    lock = JobLock(api.store.sessions.kw["bind"], clock=lambda: now[0])
    old = lock.acquire(env_id, job["id"], "conductor-a")
    now[0] += datetime.timedelta(seconds=120)                 # conductor-a went silent
    new = lock.acquire(env_id, job["id"], "conductor-b", stale_after=60)
    assert (old.token, new.token) == (1, 2)

    def task_event(change_id, fence):
        api.store.job_events.apply(contract.fenced(contract.task_event_body(
            env_id, job["id"], {"change_id": change_id, "status": "ok"}), fence), change_id)

    def report(text, fence):
        api.store.reports.add(contract.fenced(contract.report_body(
            env_id, "environment", text, "info", env_id), fence), text)

    task_event("from-a", old.token)
    task_event("from-b", new.token)
    report("report of a", old.token)
    report("report of b", new.token)
    late = dict(copy.deepcopy(model), services=[])
    api.store.results.apply(contract.fenced(contract.result_body(late), old.token), job["id"])
    shown = api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()
    assert [t["change_id"] for t in shown["tasks"]] == ["from-b"]
    assert shown["state"] == "running"                         # a's result changed nothing
    api.store.results.apply(contract.fenced(contract.result_body(model), new.token), job["id"])
    done = api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()
    assert done["state"] == "success"
    texts = [r["text"] for r in
             api.client.get(f"/environments/{env_id}/deployments/{job['id']}").json()["reports"]]
    assert "report of b" in texts and "report of a" not in texts
    assert len(api.client.get(f"/environments/{env_id}").json()["services"]) == 2
