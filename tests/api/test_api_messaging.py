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
