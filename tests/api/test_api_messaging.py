"""The API process with real messaging: tasks out, results and reports in."""
from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from fornace.api.server import ApiService
from apikit import web_server
from fornace.cli.main import build_conf
from fornace.common import contract
from fornace.common.broker import Broker
from waiting import wait_for


@pytest.fixture(params=["memory", "rabbitmq"])
def service(request, tmp_path):
    url = "memory://" if request.param == "memory" else request.getfixturevalue("amqp_vhost")
    conf = build_conf()
    conf(["api"], default_config_files=[])
    conf.set_override("url", url, group="broker")
    svc = ApiService(conf, f"sqlite:///{tmp_path / 'msg.sqlite'}")
    broker = Broker(url)
    broker.drain(contract.TASKS, timeout=0.2)  # leftovers of earlier runs
    consumer = svc.start_consumers()
    assert consumer.ready.wait(10)
    yield svc, TestClient(svc.app), broker
    svc.stop()
    broker.close()


def test_deploy_result_and_reports_round_trip(service):
    svc, client, broker = service
    env = client.post("/environments", json={"name": f"msg-{uuid.uuid4().hex[:6]}"}).json()
    session = client.post(f"/environments/{env['id']}/configure").json()["id"]
    client.post(f"/environments/{env['id']}/services/", json=web_server(),
                headers={"X-Configuration-Session": session})
    assert client.post(f"/environments/{env['id']}/sessions/{session}/deploy").status_code == 200

    tasks = wait_for(lambda: broker.drain(contract.TASKS, timeout=0.5, count=1),
                     "the deployment task")
    body, message_id = tasks[0]
    task = contract.parse_task(body)
    assert task.environment_id == env["id"]
    unit = task.model["services"][0]["units"][0]["id"]

    report = contract.report_body(unit, "unit", "Instance created", "info", env["id"])
    for _ in range(2):  # a redelivered report is stored once
        broker.publish(contract.REPORTS, report, message_id="report-1-" + env["id"])
    broker.publish(contract.REPORTS, {"text": "garbage"}, message_id="bad-" + env["id"])
    model = dict(task.model, temp={"x": 1})
    broker.publish(contract.RESULTS, contract.result_body(model), message_id=message_id)

    shown = wait_for(lambda: (lambda e: e if e["version"] == 1 else None)(
        client.get(f"/environments/{env['id']}").json()), "the result to be stored")
    assert shown["status"] == "ready"
    reports = wait_for(lambda: client.get(
        f"/environments/{env['id']}/deployments/{message_id}").json()["reports"],
        "the report to be stored")
    assert [r["text"] for r in reports] == ["Instance created"]
    deployment = client.get(f"/environments/{env['id']}/deployments").json()["deployments"][0]
    assert deployment["state"] == "success"


def test_job_events_and_results_are_stored_in_order(service):
    """Job events come in batches, and a result after the job events before it
    on the results queue (else it would settle their tasks as cancelled)."""
    svc, client, broker = service
    env = client.post("/environments", json={"name": f"ev-{uuid.uuid4().hex[:6]}"}).json()
    session = client.post(f"/environments/{env['id']}/configure").json()["id"]
    client.post(f"/environments/{env['id']}/services/", json=web_server(),
                headers={"X-Configuration-Session": session})
    assert client.post(f"/environments/{env['id']}/sessions/{session}/deploy").status_code == 200
    body, job_id = wait_for(lambda: broker.drain(contract.TASKS, timeout=0.5, count=1),
                            "the deployment task")[0]
    model = contract.parse_task(body).model

    def task(change_id, **fields):
        return contract.task_event_body(env["id"], job_id, {"change_id": change_id, **fields})

    def tasks():
        return client.get(f"/environments/{env['id']}/jobs/{job_id}").json()["tasks"]

    for n in range(60):
        broker.publish(contract.JOB_EVENTS, task(f"K{n % 3}", status="running",
                                                 log=[f"line {n}"]), f"ev-{n}")
    wait_for(lambda: sum(len(t["log"]) for t in tasks()) == 60, "the job events")
    for k in range(3):
        broker.publish(contract.RESULTS, task(f"K{k}", status="ok", log=["end"]), f"end-{k}")
    broker.publish(contract.RESULTS, contract.result_body(model), message_id=job_id)
    wait_for(lambda: client.get(f"/environments/{env['id']}").json()["version"] == 1,
             "the result")
    assert [(t["change_id"], t["status"], t["summary"], t["log"]) for t in tasks()] == [
        (f"K{k}", "ok", None, [f"line {n}" for n in range(k, 60, 3)] + ["end"])
        for k in range(3)]
