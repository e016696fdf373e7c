"""One conflict rule: every call that would change a busy environment (one whose
job runs) answers 409 with one message naming that job, and the job's id and
kind in the error object; permission problems stay 403, missing things 404."""
from __future__ import annotations

import copy
from typing import Any, Callable

import pytest

from apikit import Api, make_api, web_server
from fornace.common import contract

SESSION = "X-Configuration-Session"


@pytest.fixture
def api(tmp_path) -> Api:
    return make_api(f"sqlite:///{tmp_path / 'conflicts.sqlite'}")


class Busy:
    """An environment whose job runs (nothing consumes the published task), a
    second session opened before the job started and one of its services."""

    def __init__(self, api: Api, env: dict[str, Any], session: str, other: str,
                 service_id: str) -> None:
        self.api, self.env, self.session, self.other = api, env, session, other
        self.service_id = service_id

    @property
    def path(self) -> str:
        return f"/environments/{self.env['id']}"

    def job(self) -> dict[str, Any]:
        jobs = self.api.client.get(f"{self.path}/jobs").json()["jobs"]
        running = [job for job in jobs if job["state"] == "running"]
        assert len(running) == 1, jobs
        return running[0]


def open_session(api: Api, env_id: str, headers: dict[str, str] | None = None) -> str:
    response = api.client.post(f"/environments/{env_id}/configure", headers=headers or {})
    assert response.status_code == 200, response.text
    return response.json()["id"]


def add(api: Api, env_id: str, session: str, service: dict[str, Any]) -> dict[str, Any]:
    response = api.client.post(f"/environments/{env_id}/services", json=service,
                               headers={SESSION: session})
    assert response.status_code == 200, response.text
    return response.json()


def finish(api: Api) -> None:
    """The conductor's answer to the last task: the job ends, successfully."""
    body, message_id = api.published.tasks[-1]
    api.store.results.apply(contract.result_body(copy.deepcopy(body)), message_id)


def first_deploy(api: Api, name: str = "web") -> Busy:
    """A never-deployed environment whose first deployment runs."""
    env = api.client.post("/environments", json={"name": name}).json()
    session, other = open_session(api, env["id"]), open_session(api, env["id"])
    add(api, env["id"], session, web_server("frontend"))
    service = add(api, env["id"], other, web_server("backend"))
    assert api.client.post(f"/environments/{env['id']}/sessions/{session}/deploy"
                           ).status_code == 200
    return Busy(api, env, session, other, service["id"])


def deployed_then(api: Api, start: Callable[[Busy], Any], name: str = "web") -> Busy:
    """A deployed environment, a session opened on it, then the job ``start`` starts."""
    busy = first_deploy(api, name)
    finish(api)
    busy.other = open_session(api, busy.env["id"])
    busy.service_id = add(api, busy.env["id"], busy.other, web_server("backend"))["id"]
    start(busy)
    return busy


def check(busy: Busy) -> None:
    response = busy.api.client.post(f"{busy.path}/actions/check")
    assert response.status_code == 202, response.text


def delete(busy: Busy) -> None:
    response = busy.api.client.delete(busy.path)
    assert response.status_code == 200, response.text


# Every call that would change the environment: (name, method, path, body, session?)
CHANGES = [
    ("open a session", "post", "/configure", None, None),
    ("deploy another session", "post", "/sessions/{other}/deploy", None, None),
    ("deploy the running session again", "post", "/sessions/{session}/deploy", None, None),
    ("run an action", "post", "/actions/check", None, None),
    ("plan", "post", "/actions/plan", None, None),
    ("add a service", "post", "/services", web_server("late"), "other"),
    ("add a list of services", "post", "/services", [web_server("late")], "other"),
    ("edit a service", "put", "/services/{service}/name", "renamed", "other"),
    ("remove a service", "delete", "/services/{service}", None, "other"),
    ("rename the environment", "put", "", {"name": "renamed"}, None),
    ("delete the environment", "delete", "", None, None),
    ("delete the deploying session", "delete", "/sessions/{session}", None, None),
]


def call(busy: Busy, method: str, path: str, body: Any, session: str | None,
         headers: dict[str, str] | None = None) -> Any:
    sent = dict(headers or {})
    if session:
        sent[SESSION] = getattr(busy, session)
    url = busy.path + path.format(other=busy.other, session=busy.session,
                                  service=busy.service_id)
    return busy.api.client.request(method, url, json=body, headers=sent)


def assert_names_the_job(response: Any, busy: Busy, kind: str) -> None:
    job = busy.job()
    assert job["action"] == kind
    assert response.status_code == 409, response.text
    error = response.json()["error"]
    assert (error["code"], error["title"]) == (409, "Conflict")
    assert error["message"] == (
        f"environment {busy.env['name']} is busy: job {job['id']} ({kind}) running since "
        f"{job['started']}Z; wait for it to end or abandon it")
    assert error["job"] == {"id": job["id"], "kind": kind, "started": f"{job['started']}Z"}
    assert error["environment"] == {"id": busy.env["id"], "name": busy.env["name"]}
    assert "abandon=true" not in error["message"]


@pytest.mark.parametrize("name, method, path, body, session", CHANGES,
                         ids=[change[0] for change in CHANGES])
def test_a_change_during_the_first_deployment_is_409_naming_it(api, name, method, path,
                                                                body, session):
    busy = first_deploy(api)
    tasks = len(api.published.tasks)
    before = api.client.get(f"{busy.path}/services", headers={SESSION: busy.other}).json()

    assert_names_the_job(call(busy, method, path, body, session), busy, "deploy")

    # nothing changed: no task, no job, the same name and services, the job still runs
    assert len(api.published.tasks) == tasks
    assert len(api.client.get(f"{busy.path}/jobs").json()["jobs"]) == 1
    shown = api.client.get(busy.path).json()
    assert (shown["name"], shown["status"]) == ("web", "deploying")
    assert api.client.get(f"{busy.path}/services",
                          headers={SESSION: busy.other}).json() == before
    assert api.client.get(f"{busy.path}/sessions/{busy.session}").json()["state"] == \
        "deploying"


@pytest.mark.parametrize("kind, start", [("check", check), ("delete", delete)])
@pytest.mark.parametrize("name, method, path, body, session",
                         [c for c in CHANGES if "running session" not in c[0]
                          and "deploying session" not in c[0]],
                         ids=[c[0] for c in CHANGES if "running session" not in c[0]
                              and "deploying session" not in c[0]])
def test_a_change_during_any_job_is_409_naming_it(api, kind, start, name, method, path, body,
                                                  session):
    busy = deployed_then(api, start)
    assert_names_the_job(call(busy, method, path, body, session), busy, kind)


def test_reads_go_on_while_a_job_runs(api):
    busy = first_deploy(api)
    for path in ("", "/services", f"/sessions/{busy.session}", "/jobs", "/status",
                 "/topology", "/deployments", "/lastStatus"):
        response = api.client.get(busy.path + path)
        assert response.status_code == 200, (path, response.text)
    assert api.client.get(f"{busy.path}/services", headers={SESSION: busy.other}
                          ).status_code == 200


def test_once_the_job_ends_or_is_abandoned_the_changes_go_through(api):
    busy = first_deploy(api)
    finish(api)
    assert api.client.put(busy.path, json={"name": "web2"}).status_code == 200
    session = open_session(api, busy.env["id"])
    add(api, busy.env["id"], session, web_server("late"))
    assert api.client.post(f"{busy.path}/sessions/{session}/deploy").status_code == 200
    assert api.client.post(f"{busy.path}/actions/check").status_code == 409
    assert api.client.post(f"{busy.path}/abandon").status_code == 200
    assert api.client.post(f"{busy.path}/actions/check").status_code == 202


def test_delete_with_abandon_is_the_way_out_of_a_busy_environment(api):
    busy = first_deploy(api)
    assert api.client.delete(busy.path).status_code == 409
    assert api.client.delete(busy.path, params={"abandon": "true"}).status_code == 200
    assert api.client.get(busy.path).status_code == 404


def test_other_tenants_are_refused_403_and_missing_environments_404_even_when_busy(api):
    busy = first_deploy(api)
    stranger = api.as_tenant("t2", "u2")
    for name, method, path, body, session in CHANGES:
        response = call(busy, method, path, body, session, headers=stranger)
        assert response.status_code == 403, (name, response.text)
        assert "not authorized" in response.json()["error"]["message"], name
        assert "job" not in response.json()["error"], name
    # another user of the tenant may not use my session: a permission problem too
    colleague = api.as_tenant("t1", "u2")
    response = call(busy, "post", "/services", web_server("x"), "other", headers=colleague)
    assert response.status_code == 403 and "session" in response.json()["error"]["message"]
    missing = api.client.post("/environments/nope/configure")
    assert missing.status_code == 404
    assert api.client.put("/environments/nope", json={"name": "x"}).status_code == 404


def test_every_changing_route_documents_its_409_with_the_job(api):
    schema = api.client.get("/openapi.json").json()
    routes = {("post", "/environments/{env_id}/configure"),
              ("post", "/environments/{env_id}/sessions/{session_id}/deploy"),
              ("delete", "/environments/{env_id}/sessions/{session_id}"),
              ("post", "/environments/{env_id}/actions/{name}"),
              ("post", "/environments/{env_id}/services{path}"),
              ("put", "/environments/{env_id}/services{path}"),
              ("delete", "/environments/{env_id}/services{path}"),
              ("put", "/environments/{env_id}"),
              ("delete", "/environments/{env_id}"),
              ("post", "/environments")}
    for method, path in routes:
        responses = schema["paths"][path][method]["responses"]
        assert "409" in responses, (method, path)
        error = responses["409"]["content"]["application/json"]["schema"]
        if "$ref" in error:
            error = schema["components"]["schemas"][error["$ref"].rsplit("/", 1)[1]]
        fields = error["properties"]["error"]["properties"]
        assert {"message", "job", "environment", "existing"} <= set(fields), (method, path)
        assert fields["job"]["required"] == ["id", "kind"]
