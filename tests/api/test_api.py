"""The REST API through HTTP (in process), on SQLite."""
from __future__ import annotations

import json

import pytest

from apikit import make_api, web_server
from fornace.common import contract


@pytest.fixture
def api(tmp_path):
    return make_api(f"sqlite:///{tmp_path / 'api.sqlite'}")


def create_env(api, name="env1", headers=None):
    response = api.client.post("/environments", json={"name": name}, headers=headers or {})
    assert response.status_code == 200, response.text
    return response.json()


def open_session(api, env_id, headers=None):
    response = api.client.post(f"/environments/{env_id}/configure", headers=headers or {})
    assert response.status_code == 200, response.text
    return response.json()["id"]


def add_service(api, env_id, session_id, service, headers=None):
    return api.client.post(f"/environments/{env_id}/services/", json=service,
                           headers={"X-Configuration-Session": session_id, **(headers or {})})


def deploy(api, env_id, session_id, headers=None):
    return api.client.post(f"/environments/{env_id}/sessions/{session_id}/deploy",
                           headers=headers or {})


def finish(api, model, message_id, reports=()):
    for index, (level, entity_id, text) in enumerate(reports):
        api.store.reports.add(contract.report_body(entity_id, "unit", text, level, model["id"]),
                              f"{message_id}-r{index}")
    api.store.results.apply(contract.result_body(model), message_id)


# -- environments -----------------------------------------------------------

@pytest.mark.parametrize("prefix", ["", "/v1"])
def test_environment_crud(api, prefix):
    created = api.client.post(f"{prefix}/environments", json={"name": "dc1"}).json()
    assert set(created) >= {"id", "name", "created", "updated", "tenant_id", "version", "status"}
    assert (created["name"], created["version"], created["tenant_id"]) == ("dc1", 0, "t1")
    listed = api.client.get(f"{prefix}/environments").json()
    assert [e["id"] for e in listed["environments"]] == [created["id"]]
    shown = api.client.get(f"{prefix}/environments/{created['id']}").json()
    assert shown["services"] == [] and shown["status"] == "ready"
    renamed = api.client.put(f"{prefix}/environments/{created['id']}", json={"name": "dc2"})
    assert renamed.json()["name"] == "dc2"
    assert api.client.get(f"{prefix}/environments/{created['id']}").json()["name"] == "dc2"
    assert api.client.delete(f"{prefix}/environments/{created['id']}").status_code == 200
    gone = api.client.get(f"{prefix}/environments/{created['id']}")
    assert gone.status_code == 404
    assert gone.headers["content-type"] == "application/json"
    assert gone.json()["error"]["code"] == 404


def test_tenants_are_isolated(api):
    a, b = api.as_tenant("tA", "ua"), api.as_tenant("tB", "ub")
    env = create_env(api, "mine", a)
    session = open_session(api, env["id"], a)
    assert add_service(api, env["id"], session, web_server(), a).status_code == 200
    assert api.client.get("/environments", headers=b).json() == {"environments": []}
    for method, path, body in [
            ("get", f"/environments/{env['id']}", None),
            ("put", f"/environments/{env['id']}", {"name": "x"}),
            ("delete", f"/environments/{env['id']}", None),
            ("post", f"/environments/{env['id']}/configure", None),
            ("get", f"/environments/{env['id']}/sessions/{session}", None),
            ("get", f"/environments/{env['id']}/services", None),
            ("get", f"/environments/{env['id']}/deployments", None),
            ("get", f"/environments/{env['id']}/lastStatus", None)]:
        response = api.client.request(method, path, json=body, headers=b)
        assert response.status_code == 403, (method, path, response.text)
    response = add_service(api, env["id"], session, web_server("other"), b)
    assert response.status_code == 403
    # another user of the same tenant cannot use my session
    other_user = api.as_tenant("tA", "someone-else")
    assert add_service(api, env["id"], session, web_server("x"), other_user).status_code == 403
    assert api.client.get("/deployments", headers=b).json() == {"deployments": []}


def test_bad_environment_bodies(api):
    for body in ({}, {"name": ""}, {"name": 5}, {"name": "a", "extra": 1}, [1]):
        response = api.client.post("/environments", json=body)
        assert response.status_code == 400, body
        assert response.json()["error"]["message"]
    response = api.client.post("/environments", content=b"{nope",
                               headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert "JSON" in response.json()["error"]["message"]


def test_oversized_body_is_413(tmp_path):
    api = make_api(f"sqlite:///{tmp_path / 'small.sqlite'}", max_body_size=2048)
    response = api.client.post("/environments", content=b'{"name": "' + b"x" * 4000 + b'"}',
                               headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == 413
    assert api.client.get("/environments").json() == {"environments": []}


# -- sessions -------------------------------------------------------------------

def test_session_lifecycle_and_status(api):
    env = create_env(api)
    session = open_session(api, env["id"])
    shown = api.client.get(f"/environments/{env['id']}/sessions/{session}").json()
    assert (shown["state"], shown["version"], shown["user_id"]) == ("open", 0, "u1")
    assert api.client.get(f"/environments/{env['id']}").json()["status"] == "pending"
    assert api.client.delete(f"/environments/{env['id']}/sessions/{session}").status_code == 200
    assert api.client.get(f"/environments/{env['id']}/sessions/{session}").status_code == 404
    assert api.client.get(f"/environments/{env['id']}").json()["status"] == "ready"


def test_first_deploy_wins_and_other_sessions_become_invalid(api):
    env = create_env(api)
    first, second = open_session(api, env["id"]), open_session(api, env["id"])
    assert add_service(api, env["id"], first, web_server()).status_code == 200
    assert deploy(api, env["id"], first).status_code == 200
    assert api.client.get(f"/environments/{env['id']}").json()["status"] == "deploying"
    # while deploying: no new session, no second deploy, no deleting the deploying
    # session -- each a 409 naming the running job (tests/api/test_conflicts.py)
    assert api.client.post(f"/environments/{env['id']}/configure").status_code == 409
    assert deploy(api, env["id"], second).status_code == 409
    assert deploy(api, env["id"], first).status_code == 409
    assert api.client.delete(f"/environments/{env['id']}/sessions/{first}").status_code == 409
    body, message_id = api.published.tasks[-1]
    finish(api, body, message_id)
    assert api.client.get(f"/environments/{env['id']}/sessions/{first}").json()["state"] == \
        "deployed"
    env_now = api.client.get(f"/environments/{env['id']}").json()
    assert (env_now["status"], env_now["version"]) == ("ready", 1)
    # the other session was opened on version 0: invalid now
    assert api.client.get(f"/environments/{env['id']}/sessions/{second}").status_code == 403
    assert deploy(api, env["id"], second).status_code == 403
    assert add_service(api, env["id"], second, web_server("late")).status_code == 403


def test_deploy_publishes_the_task_contract(api):
    env = create_env(api, headers={"X-Auth-Token": "tok-123"})
    session = open_session(api, env["id"])
    add_service(api, env["id"], session, web_server())
    assert deploy(api, env["id"], session, {"X-Auth-Token": "tok-123"}).status_code == 200
    body, message_id = api.published.tasks[-1]
    task = contract.parse_task(body)
    assert task.environment_id == env["id"] and task.tenant_id == "t1"
    assert task.token == "tok-123"
    service = task.model["services"][0]
    assert service["adminPassword"] == "P@ssw0rd-web"  # the conductor needs it
    assert service["units"][0]["name"] == "frontend_instance_0"
    deployments = api.client.get(f"/environments/{env['id']}/deployments").json()["deployments"]
    assert [d["id"] for d in deployments] == [message_id]
    assert deployments[0]["state"] == "running"
    assert "P@ssw0rd-web" not in json.dumps(deployments)


def test_broker_down_leaves_nothing_half_done(api):
    env = create_env(api)
    session = open_session(api, env["id"])
    add_service(api, env["id"], session, web_server())
    api.published.fail = True
    response = deploy(api, env["id"], session)
    assert response.status_code == 503
    assert api.client.get(f"/environments/{env['id']}").json()["status"] == "pending"
    assert api.client.get(f"/environments/{env['id']}/deployments").json() == {"deployments": []}
    api.published.fail = False
    assert deploy(api, env["id"], session).status_code == 200


# -- services ---------------------------------------------------------------------

def test_services_crud_and_tree_traversal(api):
    env = create_env(api)
    session = open_session(api, env["id"])
    headers = {"X-Configuration-Session": session}
    created = add_service(api, env["id"], session, web_server(units=[{}, {"name": "own"}]))
    assert created.status_code == 200, created.text
    service = created.json()
    assert service["id"] and service["created"] and service["updated"]
    assert [u["name"] for u in service["units"]] == ["frontend_instance_0", "own"]
    assert all(u["id"] for u in service["units"])
    assert service["adminPassword"] == "***"
    base = f"/environments/{env['id']}/services"
    listed = api.client.get(base, headers=headers).json()
    assert isinstance(listed, list) and listed[0]["id"] == service["id"]
    # without the session header the deployed (empty) description is shown
    assert api.client.get(base).json() == []
    unit_id = service["units"][0]["id"]
    assert api.client.get(f"{base}/{service['id']}/units/0/name", headers=headers).json() == \
        "frontend_instance_0"
    assert api.client.get(f"{base}/{service['id']}/units/{unit_id}/name",
                          headers=headers).json() == "frontend_instance_0"
    put = api.client.put(f"{base}/{service['id']}/domain", json="corp.loc", headers=headers)
    assert put.status_code == 200 and put.json() == "corp.loc"
    added = api.client.post(f"{base}/{service['id']}/units", json={"location": "east"},
                            headers=headers)
    assert added.status_code == 200, added.text
    units = api.client.get(f"{base}/{service['id']}/units", headers=headers).json()
    assert [u["name"] for u in units] == ["frontend_instance_0", "own", "frontend_instance_2"]
    assert api.client.delete(f"{base}/{service['id']}/units/1", headers=headers).status_code == 200
    assert len(api.client.get(f"{base}/{service['id']}/units", headers=headers).json()) == 2
    missing = api.client.get(f"{base}/{service['id']}/nope", headers=headers)
    assert missing.status_code == 404 and "nope" in missing.json()["error"]["message"]
    assert api.client.delete(f"{base}/{service['id']}", headers=headers).status_code == 200
    assert api.client.get(base, headers=headers).json() == []


def test_services_need_a_valid_session(api):
    env = create_env(api)
    base = f"/environments/{env['id']}/services/"
    assert api.client.post(base, json=web_server()).status_code == 400  # no header
    assert api.client.post(base, json=web_server(),
                           headers={"X-Configuration-Session": "nope"}).status_code == 404


@pytest.mark.parametrize("service, field", [
    ({"name": "x", "type": "teapot", "units": [{}]}, "type"),
    ({"type": "webServer", "units": [{}]}, "name"),
    ({"name": "x", "type": "webServerFarm", "units": [{}]}, "loadBalancerPort"),
    ({"name": "x", "type": "webServer", "units": [{}], "bogus": 1}, "bogus"),
    ({"name": "x", "type": "webServer", "units": [{}], "unitNamingPattern": "a##"},
     "unitNamingPattern"),
    ({"name": "x", "type": "activeDirectory", "domain": "a.loc", "adminPassword": "p",
      "units": [{"isMaster": True}]}, "recoveryPassword"),
    ("not an object", ""),
])
def test_invalid_services_are_400_naming_the_field(api, service, field):
    env = create_env(api)
    session = open_session(api, env["id"])
    response = add_service(api, env["id"], session, service)
    assert response.status_code == 400, response.text
    assert field in response.json()["error"]["message"]
    listed = api.client.get(f"/environments/{env['id']}/services",
                            headers={"X-Configuration-Session": session}).json()
    assert listed == []  # nothing stored half-way


def test_put_with_masked_password_keeps_the_stored_one(api):
    env = create_env(api)
    session = open_session(api, env["id"])
    headers = {"X-Configuration-Session": session}
    service = add_service(api, env["id"], session, web_server()).json()
    base = f"/environments/{env['id']}/services/{service['id']}"
    shown = api.client.get(base, headers=headers).json()
    shown["name"] = "renamed"
    assert shown["adminPassword"] == "***"
    assert api.client.put(base, json=shown, headers=headers).status_code == 200
    deploy(api, env["id"], session)
    body, _ = api.published.tasks[-1]
    stored = body["services"][0]
    assert (stored["name"], stored["adminPassword"]) == ("renamed", "P@ssw0rd-web")


# -- results, reports, deployments ------------------------------------------------

def test_results_and_reports_are_stored_once(api):
    env = create_env(api)
    session = open_session(api, env["id"])
    service = add_service(api, env["id"], session, web_server()).json()
    deploy(api, env["id"], session)
    body, message_id = api.published.tasks[-1]
    unit_id = body["services"][0]["units"][0]["id"]
    model = json.loads(json.dumps(body))
    model["services"][0]["units"][0]["state"] = {"hostname": "web1"}
    model["temp"] = {"x": 1}
    report = contract.report_body(unit_id, "unit", "Instance web1 created with P@ssw0rd-web",
                                  "info", env["id"])
    api.store.reports.add(report, "rep-1")
    api.store.reports.add(report, "rep-1")  # redelivered
    api.store.results.apply(contract.result_body(model), message_id)
    api.store.results.apply(contract.result_body(model), message_id)  # redelivered
    shown = api.client.get(f"/environments/{env['id']}").json()
    assert (shown["version"], shown["status"]) == (1, "ready")
    assert shown["services"][0]["units"][0]["state"] == {"hostname": "web1"}
    deployments = api.client.get(f"/environments/{env['id']}/deployments").json()["deployments"]
    assert deployments[0]["state"] == "success" and deployments[0]["finished"]
    reports = api.client.get(f"/environments/{env['id']}/deployments/{message_id}").json()
    assert [r["text"] for r in reports["reports"]] == ["Instance web1 created with ***"]
    by_service = api.client.get(f"/environments/{env['id']}/deployments/{message_id}",
                                params={"service_id": service["id"]}).json()["reports"]
    assert len(by_service) == 1
    assert api.client.get(f"/environments/{env['id']}/deployments/{message_id}",
                          params={"service_id": "other"}).json() == {"reports": []}
    last = api.client.get(f"/environments/{env['id']}/lastStatus").json()["lastStatuses"]
    assert last[unit_id]["text"] == "Instance web1 created with ***"
    assert [d["id"] for d in api.client.get("/deployments").json()["deployments"]] == \
        [message_id]


def test_errors_mark_the_deployment_and_environment(api):
    env = create_env(api)
    session = open_session(api, env["id"])
    add_service(api, env["id"], session, web_server())
    deploy(api, env["id"], session)
    body, message_id = api.published.tasks[-1]
    finish(api, body, message_id, [("error", "u", "it broke")])
    assert api.client.get(f"/environments/{env['id']}").json()["status"] == "deploy failure"
    deployment = api.client.get(f"/environments/{env['id']}/deployments").json()["deployments"][0]
    assert deployment["state"] == "completed_w_errors"


def test_delete_deployed_environment_sends_a_deletion_task(api):
    env = create_env(api)
    session = open_session(api, env["id"])
    add_service(api, env["id"], session, web_server())
    deploy(api, env["id"], session)
    finish(api, *api.published.tasks[-1])
    assert api.client.delete(f"/environments/{env['id']}").status_code == 200
    assert api.client.get(f"/environments/{env['id']}").json()["status"] == "deleting"
    body, message_id = api.published.tasks[-1]
    task = contract.parse_task(body)
    assert task.deleted and task.model["services"] == {}
    finish(api, {"id": env["id"], "name": "env1", "services": {}, "deleted": True}, message_id)
    assert api.client.get(f"/environments/{env['id']}").status_code == 404


def test_abandon_removes_a_busy_environment(api):
    env = create_env(api)
    session = open_session(api, env["id"])
    add_service(api, env["id"], session, web_server())
    deploy(api, env["id"], session)
    assert api.client.delete(f"/environments/{env['id']}").status_code == 409
    assert api.client.delete(f"/environments/{env['id']}",
                             params={"abandon": "true"}).status_code == 200
    assert api.client.get(f"/environments/{env['id']}").status_code == 404
    # a clean-up deletion still goes out, so a conductor removes the stack it made
    cleanup, cleanup_id = api.published.tasks[-1]
    task = contract.parse_task(cleanup)
    assert task.deleted and task.environment_id == env["id"] and task.action == "delete"
    deploy_body, deploy_id = api.published.tasks[-2]
    api.store.results.apply(contract.result_body(deploy_body), deploy_id)  # late: ignored
    finish(api, {"id": env["id"], "name": "env1", "services": {}, "deleted": True},
           cleanup_id)                                                     # ignored too
    assert api.client.get(f"/environments/{env['id']}").status_code == 404


def test_unknown_route_and_method_are_json(api):
    response = api.client.get("/nothing-here")
    assert response.status_code == 404 and response.json()["error"]["code"] == 404
    response = api.client.patch("/environments")
    assert response.status_code == 405 and response.headers["content-type"] == "application/json"


def test_error_report_after_the_result_still_counts(api):
    env = create_env(api)
    session = open_session(api, env["id"])
    add_service(api, env["id"], session, web_server())
    deploy(api, env["id"], session)
    body, message_id = api.published.tasks[-1]
    api.store.results.apply(contract.result_body(body), message_id)
    api.store.reports.add(contract.report_body("u", "unit", "late", "error", env["id"]), "late")
    assert api.client.get(f"/environments/{env['id']}").json()["status"] == "deploy failure"
    deployment = api.client.get(f"/environments/{env['id']}/deployments").json()["deployments"][0]
    assert deployment["state"] == "completed_w_errors"
