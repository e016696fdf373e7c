"""The results store (:mod:`fornace.api.stores.results`): a job's final model
ends the job and updates (or, for a plan, leaves) its environment -- on SQLite
and on the real PostgreSQL."""
from __future__ import annotations

import copy

import pytest

from fornace.api.context import Context
from fornace.api.errors import NotFound
from fornace.common import contract
from test_jobs_api import _api, action, deployed, finish, new_env, web_server


@pytest.fixture(params=["sqlite", "postgres"])
def api(request, tmp_path):
    yield from _api(request.param, tmp_path)


def test_a_plan_job_does_not_change_the_description(api):
    env_id, model = deployed(api)
    session = api.client.post(f"/environments/{env_id}/configure").json()["id"]
    job = action(api, env_id, "plan", {"change_detection": "skip"}).json()
    changed = copy.deepcopy(api.published.tasks[-1][0])
    changed["services"] = []
    finish(api, job["id"], changed)
    shown = api.client.get(f"/environments/{env_id}").json()
    assert (shown["status"], shown["version"]) == ("pending", 1)  # the session is still valid
    assert len(shown["services"]) == 2
    assert api.client.get(f"/environments/{env_id}/sessions/{session}").status_code == 200
    done = api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()
    assert (done["state"], done["action"]) == ("success", "plan")


def test_other_jobs_store_the_model_and_invalidate_sessions(api):
    """A check that finds a unit down ends completed_w_errors and stores the
    units' statuses; the environment's deploy status is not its business."""
    env_id, model = deployed(api)
    session = api.client.post(f"/environments/{env_id}/configure").json()["id"]
    job = action(api, env_id, "check", {}).json()
    checked = copy.deepcopy(api.published.tasks[-1][0])
    checked["services"][0]["units"][0]["state"] = {"checked": True}
    finish(api, job["id"], checked, [("error", "unit unreachable")])
    shown = api.client.get(f"/environments/{env_id}").json()
    assert (shown["status"], shown["version"]) == ("ready", 2)
    assert shown["services"][0]["units"][0]["state"] == {"checked": True}
    assert api.client.get(f"/environments/{env_id}/sessions/{session}").status_code == 403
    assert api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()["state"] == \
        "completed_w_errors"


def test_a_result_ends_the_job_with_errors_its_reports_not_stored_yet(api):
    """Reports and results travel on two queues: the result's count of error
    reports (1.11) decides the job's state even when it comes first; the late
    report then changes nothing more."""
    env_id, session = new_env(api.client, [web_server()])
    api.client.post(f"/environments/{env_id}/sessions/{session}/deploy")
    body, job_id = api.published.tasks[-1]
    api.store.results.apply(contract.result_body(copy.deepcopy(body), error_reports=1), job_id)
    shown = api.client.get(f"/environments/{env_id}/jobs/{job_id}").json()
    assert shown["state"] == "completed_w_errors"
    assert api.client.get(f"/environments/{env_id}").json()["status"] == "deploy failure"
    api.store.reports.add(contract.report_body(env_id, "environment", "it failed", "error",
                                               env_id), f"{job_id}-report-1")
    reports = api.client.get(f"/environments/{env_id}/deployments/{job_id}").json()["reports"]
    assert [r["text"] for r in reports if r["level"] == "error"] == ["it failed"]
    shown = api.client.get(f"/environments/{env_id}/jobs/{job_id}").json()
    assert shown["state"] == "completed_w_errors"


@pytest.mark.parametrize("name, parameters", [
    ("check", {}), ("execute_operation", {"operation": "restart"})])
def test_jobs_that_deploy_nothing_keep_the_deploy_status(api, name, parameters):
    env_id, model = deployed(api)
    # a failed deployment, then a successful check or operation: still a failed deployment
    session = api.client.post(f"/environments/{env_id}/configure").json()["id"]
    api.client.post(f"/environments/{env_id}/sessions/{session}/deploy")
    body, message_id = api.published.tasks[-1]
    finish(api, message_id, copy.deepcopy(body), [("error", "web1 failed")])
    assert api.client.get(f"/environments/{env_id}").json()["status"] == "deploy failure"
    job = action(api, env_id, name, parameters).json()
    finish(api, job["id"], copy.deepcopy(api.published.tasks[-1][0]))
    assert api.client.get(f"/environments/{env_id}").json()["status"] == "deploy failure"
    # after a good deployment, a failing one leaves it ready
    session = api.client.post(f"/environments/{env_id}/configure").json()["id"]
    api.client.post(f"/environments/{env_id}/sessions/{session}/deploy")
    body, message_id = api.published.tasks[-1]
    finish(api, message_id, copy.deepcopy(body))
    job = action(api, env_id, name, parameters).json()
    finish(api, job["id"], copy.deepcopy(api.published.tasks[-1][0]), [("error", "down")])
    assert api.client.get(f"/environments/{env_id}").json()["status"] == "ready"
    assert api.client.get(f"/environments/{env_id}/jobs/{job['id']}").json()["state"] == \
        "completed_w_errors"


def test_a_failed_plan_leaves_the_environment_state_as_it_was(api):
    env_id, model = deployed(api)
    job = action(api, env_id, "plan", {}).json()
    finish(api, job["id"], copy.deepcopy(model), [("error", "cannot plan")])
    assert api.client.get(f"/environments/{env_id}").json()["status"] == "ready"


def test_a_delete_result_removes_the_environment_unless_the_job_reported_errors(api):
    ctx = Context("t1", "u1")
    kept, removed = deployed(api)[0], deployed(api)[0]
    for env_id, errors in ((kept, [("error", "the stack would not go")]), (removed, [])):
        api.store.environments.delete(ctx, env_id)
        body, job_id = api.published.tasks[-1]           # the delete job's task
        assert (body["id"], body["job"]["action"]) == (env_id, "delete")
        finish(api, job_id, body, errors)
    assert api.store.environments.get(ctx, kept)["status"] == "delete failure"
    with pytest.raises(NotFound):
        api.store.environments.get(ctx, removed)


def test_a_result_without_a_running_job_changes_nothing(api):
    env_id, model = deployed(api)
    before = api.store.environments.get(Context("t1", "u1"), env_id)
    api.store.results.apply(contract.result_body(dict(model, name="late")), "no-such-job")
    after = api.store.environments.get(Context("t1", "u1"), env_id)
    assert (after["name"], after["version"]) == (before["name"], before["version"])
    with pytest.raises(contract.ContractError, match="result message"):
        api.store.results.apply({"services": []}, "bad")
