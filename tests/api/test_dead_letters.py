"""Poison messages: what the conductor sends back and the API cannot store,
even alone, is set aside in the dead-letter table (:mod:`fornace.api.stores.deadletters`)
and acked, never retried for ever, never holding back another message, job or
tenant -- through the API's own consumer, on PostgreSQL and real RabbitMQ,
with messages published as the conductor publishes them.  Operators list
them (``GET /dead-letters``, the cloud admin only)."""
from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from apikit import reset_postgres, web_server
from fornace.api.server import ApiService
from fornace.api.stores import jobevents, results
from fornace.cli.main import build_conf
from fornace.common import contract
from fornace.common.broker import Broker
from services import postgres_url
from waiting import wait_for


class Service:
    """The API process (noauth) on PostgreSQL and a RabbitMQ vhost of the test's own."""

    def __init__(self, broker_url: str) -> None:
        self.db_url = postgres_url()
        reset_postgres(self.db_url)
        conf = build_conf()
        conf(["api"], default_config_files=[])
        conf.set_override("url", broker_url, group="broker")
        self.api = ApiService(conf, self.db_url)
        self.client = TestClient(self.api.app)
        self.broker = Broker(broker_url)

    def start(self) -> None:
        consumer = self.api.start_consumers()
        wait_for(consumer.ready.is_set, "the API's consumer to subscribe")

    def deploy(self, tenant: str) -> tuple[str, str, dict[str, Any]]:
        """A deployment of a new environment of ``tenant``: (environment id, job
        id, the task the conductor would get)."""
        headers = {"X-Tenant-Id": tenant}
        env = self.client.post("/environments", headers=headers,
                               json={"name": f"env-{uuid.uuid4().hex[:6]}"}).json()
        session = self.client.post(f"/environments/{env['id']}/configure",
                                   headers=headers).json()["id"]
        added = self.client.post(f"/environments/{env['id']}/services/", json=web_server(),
                                 headers={**headers, "X-Configuration-Session": session})
        assert added.status_code == 200, added.text
        deployed = self.client.post(f"/environments/{env['id']}/sessions/{session}/deploy",
                                    headers=headers)
        assert deployed.status_code == 200, deployed.text
        body, job_id = wait_for(lambda: self.broker.drain(contract.TASKS, timeout=0.5,
                                                          count=1), "the deployment task")[0]
        return env["id"], job_id, body

    def reports(self, tenant: str, env_id: str, job_id: str) -> list[str]:
        shown = self.client.get(f"/environments/{env_id}/deployments/{job_id}",
                                headers={"X-Tenant-Id": tenant}).json()
        return [report["text"] for report in shown["reports"]]

    def job(self, tenant: str, env_id: str, job_id: str) -> dict[str, Any]:
        return self.client.get(f"/environments/{env_id}/jobs/{job_id}",
                               headers={"X-Tenant-Id": tenant}).json()

    def environment(self, tenant: str, env_id: str) -> dict[str, Any]:
        return self.client.get(f"/environments/{env_id}", headers={"X-Tenant-Id": tenant}).json()

    def dead_letters(self, count: int) -> list[dict[str, Any]]:
        return wait_for(lambda: (lambda rows: rows if len(rows) >= count else None)(
            self.api.store.dead_letters.list(limit=1000)), f"{count} dead letters")

    def left_in_queues(self) -> list:
        """What the stopped API left unacked (RabbitMQ gives it back): nothing."""
        self.api.stop()
        return [message for queue in (contract.REPORTS, contract.RESULTS, contract.JOB_EVENTS)
                for message in self.broker.drain(queue, timeout=0.3)]

    def close(self) -> None:
        self.api.stop()
        self.broker.close()
        reset_postgres(self.db_url)


@pytest.fixture
def service(amqp_vhost):
    made = Service(amqp_vhost)
    yield made
    made.close()


def report(env_id: str, text: str, level: str = "info") -> dict[str, Any]:
    return contract.report_body(env_id, "environment", text, level, env_id)


def task_event(env_id: str, job_id: str, change_id: Any, **fields: Any) -> dict[str, Any]:
    """A job event as the conductor's recorder sends it (built by hand: the
    contract refuses some of those the tests send)."""
    return {"environment_id": env_id, "job_id": job_id, "kind": "task",
            "task": {"change_id": change_id, **fields}}


def trips_on(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, poisoned: Any) -> None:
    """``module.name`` (a store function) raises a ValueError -- a bug a
    message trips, every time -- when ``poisoned(*args)`` says so."""
    original = getattr(module, name)

    def tripping(*args: Any, **kwargs: Any) -> Any:
        if poisoned(*args):
            raise ValueError("the store trips on this message")
        return original(*args, **kwargs)
    monkeypatch.setattr(module, name, tripping)


def test_poison_messages_of_a_batch_are_set_aside_and_the_others_stored(service, monkeypatch,
                                                                        caplog):
    """A report whose text holds a NUL (PostgreSQL's text cannot), a job event
    whose change id the contract refuses, a result the store raises on alone:
    each set aside in the table with its reason, tenant, job and a masked copy
    of its body, acked (nothing is left to come again); the other messages
    of the same batches stored."""
    caplog.set_level("WARNING")
    env_id, job_id, task = service.deploy("t-poison")
    secret = task["services"][0]["adminPassword"]
    poison_result = f"{job_id}-bogus"
    trips_on(monkeypatch, results, "_store_result",
             lambda db, model, fence, error_reports, message_id: message_id == poison_result)
    broker = service.broker
    broker.publish(contract.REPORTS, report(env_id, "first"), f"{job_id}-report-1")
    broker.publish(contract.REPORTS, report(env_id, f"password {secret} \x00 and on"),
                   f"{job_id}-report-2")
    broker.publish(contract.REPORTS, report(env_id, "last"), f"{job_id}-report-3")
    broker.publish(contract.RESULTS, task_event(env_id, job_id, "T1", status="ok"),
                   f"{job_id}-event-1")
    broker.publish(contract.RESULTS, task_event(env_id, job_id, 42, status="ok"),
                   f"{job_id}-event-2")
    broker.publish(contract.RESULTS, task_event(env_id, job_id, "T2", status="ok"),
                   f"{job_id}-event-3")
    model = contract.parse_task(task).model
    broker.publish(contract.RESULTS, contract.result_body(model), poison_result)
    broker.publish(contract.RESULTS, contract.result_body(model), job_id)
    service.start()    # all of them waiting: one batch per queue

    wait_for(lambda: service.reports("t-poison", env_id, job_id) == ["first", "last"],
             "the other reports")
    wait_for(lambda: service.environment("t-poison", env_id)["version"] == 1, "the result")
    assert [(t["change_id"], t["status"]) for t in
            service.job("t-poison", env_id, job_id)["tasks"]] == [("T1", "ok"), ("T2", "ok")]
    letters = {letter["kind"]: letter for letter in service.dead_letters(3)}
    assert set(letters) == {"report", "job event", "result"}
    for letter in letters.values():
        assert letter["tenant_id"] == "t-poison" and letter["environment_id"] == env_id
    nul = letters["report"]
    assert (nul["queue"], nul["message_id"], nul["job_id"]) == (
        contract.REPORTS, f"{job_id}-report-2", job_id)
    assert nul["reason"] == ("report message: field 'text' holds a NUL (U+0000), which the "
                             "database cannot store")
    assert "password *** \\u0000 and on" in nul["body"] and secret not in nul["body"]
    event = letters["job event"]
    assert (event["queue"], event["message_id"], event["job_id"]) == (
        contract.RESULTS, f"{job_id}-event-2", job_id)
    assert "task.change_id" in event["reason"]
    result = letters["result"]
    assert (result["queue"], result["message_id"]) == (contract.RESULTS, poison_result)
    assert result["reason"] == ("storing it failed: ValueError: the store trips on this "
                                "message")
    warnings = [r.getMessage() for r in caplog.records
                if r.levelname == "WARNING" and "set aside as dead letter" in r.getMessage()]
    assert len(warnings) == 3 and any("NUL" in w for w in warnings)
    assert secret not in caplog.text
    assert service.left_in_queues() == []      # acked: never delivered again
    assert len(service.api.store.dead_letters.list()) == 3


def test_a_poisoned_deployment_of_one_tenant_holds_back_no_other_tenants(service,
                                                                          monkeypatch):
    """Tenant A's deployment sends reports with a NUL and job events the store
    trips on, at every try, interleaved with tenant B's deployment running at
    the same time on the same queues: every report, task and the result of B
    are stored, A's poison is set aside under A's name, and nothing is left
    to come again."""
    env_a, job_a, _ = service.deploy("t-a")
    env_b, job_b, task_b = service.deploy("t-b")
    trips_on(monkeypatch, jobevents._EventBatch, "store",
             lambda batch: any(event.environment_id == env_a for event, _ in batch.events))
    service.start()
    broker = service.broker
    count = 30
    for n in range(count):     # as the conductors send them, interleaved
        broker.publish(contract.REPORTS, report(env_a, f"A {n} \x00"), f"{job_a}-report-{n}")
        broker.publish(contract.RESULTS, task_event(env_a, job_a, f"A{n:03}", status="ok"),
                       f"{job_a}-event-{n}")
        broker.publish(contract.REPORTS, report(env_b, f"B {n}"), f"{job_b}-report-{n}")
        broker.publish(contract.RESULTS, task_event(env_b, job_b, f"B{n:03}", status="ok"),
                       f"{job_b}-event-{n}")
    broker.publish(contract.RESULTS, contract.result_body(contract.parse_task(task_b).model),
                   job_b)

    wait_for(lambda: service.environment("t-b", env_b)["version"] == 1, "B's result")
    assert service.environment("t-b", env_b)["status"] == "ready"
    wait_for(lambda: service.reports("t-b", env_b, job_b) == [f"B {n}" for n in range(count)],
             "all of B's reports", explain=lambda: str(service.reports("t-b", env_b, job_b)))
    assert [t["change_id"] for t in service.job("t-b", env_b, job_b)["tasks"]] == [
        f"B{n:03}" for n in range(count)]
    letters = service.dead_letters(2 * count)
    assert {(letter["tenant_id"], letter["environment_id"], letter["job_id"])
            for letter in letters} == {("t-a", env_a, job_a)}
    assert sorted(letter["kind"] for letter in letters) == ["job event"] * count + \
        ["report"] * count
    assert service.reports("t-a", env_a, job_a) == []
    assert service.left_in_queues() == []
    assert len(service.api.store.dead_letters.list(limit=1000)) == 2 * count


# -- what operators see ------------------------------------------------------------------

def test_the_cloud_admin_alone_lists_dead_letters(tmp_path):
    """GET /dead-letters: every project's, newest first (?tenant=, ?limit=), for
    the cloud admin only -- a project's admin or member is refused (403)."""
    from fornace.common.consumer import Delivery
    from test_policy import as_, chosen_api, new_env, refused

    api = chosen_api(tmp_path)
    env_a = new_env(api.client, "mia", "env-a")
    env_b = new_env(api.client, "bea", "env-b")
    api.store.dead_letters.set_aside([
        (report(env_a, "nul \x00"), Delivery("m-a", contract.REPORTS),
         contract.ContractError("the database cannot hold its values: NUL")),
        ({"environment_id": env_b, "job_id": "j", "kind": "task", "task": {"change_id": 1},
          "adminPassword": "S3cret-pass"}, Delivery("m-b", contract.JOB_EVENTS),
         contract.ContractError("field 'task.change_id' must be a string"))])
    listed = api.client.get("/dead-letters", headers=as_("root"))
    assert listed.status_code == 200, listed.text
    letters = listed.json()["dead_letters"]
    assert [(d["message_id"], d["kind"], d["tenant_id"], d["environment_id"])
            for d in letters] == [("m-b", "job event", "p-b", env_b),
                                  ("m-a", "report", "p-a", env_a)]    # newest first
    assert "S3cret-pass" not in listed.text and '"adminPassword": "***"' in letters[0]["body"]
    only_b = api.client.get("/v1/dead-letters?tenant=p-b&limit=5", headers=as_("root"))
    assert [d["message_id"] for d in only_b.json()["dead_letters"]] == ["m-b"]
    assert api.client.get("/dead-letters?tenant=nobody%00",
                          headers=as_("root")).json() == {"dead_letters": []}
    assert api.client.get("/dead-letters?limit=0", headers=as_("root")).status_code == 400
    for caller in ("mia", "pam", "dom"):
        refused(api.client.get("/dead-letters", headers=as_(caller)), "dead_letter:list")
