"""The notifications the API's stores send: once what they tell is committed,
exactly once per job however often its result or refusal comes, none for a
job whose task could not be queued (tests/system/test_notification_flows.py
runs the flows with a conductor, and on RabbitMQ)."""
from __future__ import annotations

import copy
import threading

import pytest

from apikit import make_api, web_server
from fornace.common import contract
from fornace.common.notifications import Notifications
from waiting import wait_for


class Recorder:
    """A notifier that writes down what it is handed: (priority, event, payload)."""

    publisher_id = "fornace.api.test"

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict]] = []
        self.contexts: list[dict] = []
        self.lock = threading.Lock()

    def info(self, ctxt, event_type, payload):
        with self.lock:
            self.sent.append(("INFO", event_type, payload))
            self.contexts.append(ctxt)

    def error(self, ctxt, event_type, payload):
        with self.lock:
            self.sent.append(("ERROR", event_type, payload))
            self.contexts.append(ctxt)


@pytest.fixture
def api(tmp_path):
    api = make_api(f"sqlite:///{tmp_path / 'notes.sqlite'}")
    recorder = Recorder()
    api.store.notifications = Notifications(recorder)
    api.recorder = recorder
    yield api
    api.store.notifications.close()


def sent(api, count):
    """The events sent so far, once there are ``count`` (the sender is a thread)."""
    found = wait_for(lambda: api.recorder.sent if len(api.recorder.sent) >= count else None,
                     timeout=30)
    assert found, api.recorder.sent
    return [(priority, event) for priority, event, _ in found]


def deploy(api):
    env = api.client.post("/environments", json={"name": "shop"}).json()
    session = api.client.post(f"/environments/{env['id']}/configure").json()["id"]
    api.client.post(f"/environments/{env['id']}/services/", json=web_server(),
                    headers={"X-Configuration-Session": session})
    assert api.client.post(f"/environments/{env['id']}/sessions/{session}/deploy") \
        .status_code == 200
    body, job_id = api.published.tasks[-1]
    return env["id"], body, job_id


def test_a_result_delivered_twice_ends_its_job_once(api):
    env_id, body, job_id = deploy(api)
    for _ in range(2):   # the broker delivered it again
        api.store.results.apply(contract.result_body(copy.deepcopy(body)), job_id)
    api.store.notifications.close()   # everything queued is sent
    assert sent(api, 3) == [("INFO", "environment.create.end"),
                            ("INFO", "environment.deploy.start"),
                            ("INFO", "environment.deploy.end")]
    ended = api.recorder.sent[2][2]
    assert (ended["job_id"], ended["status"], ended["user_id"]) == (job_id, "success", "u1")
    assert "P@ssw0rd-web" not in repr(api.recorder.sent)


def test_a_refused_job_ends_with_an_error_once(api):
    env_id, body, job_id = deploy(api)
    api.store.job_events.apply(contract.job_event_body(env_id, job_id, "refused",
                                                       "the environment stayed locked"), "e1")
    api.store.results.apply(contract.result_body(copy.deepcopy(body)), job_id)   # too late
    api.store.notifications.close()
    assert sent(api, 3)[2:] == [("ERROR", "environment.deploy.error")]
    assert api.recorder.sent[2][2]["status"] == "refused"
    assert len(api.recorder.sent) == 3


def test_a_job_whose_task_cannot_be_queued_never_started(api):
    env = api.client.post("/environments", json={"name": "shop"}).json()
    session = api.client.post(f"/environments/{env['id']}/configure").json()["id"]
    api.published.fail = True
    assert api.client.post(f"/environments/{env['id']}/sessions/{session}/deploy") \
        .status_code == 503
    api.store.notifications.close()
    assert sent(api, 1) == [("INFO", "environment.create.end")]
    assert len(api.recorder.sent) == 1


def test_a_failed_deletion_is_an_error_and_the_environment_stays(api):
    env_id, body, job_id = deploy(api)
    api.store.results.apply(contract.result_body(copy.deepcopy(body)), job_id)
    assert api.client.delete(f"/environments/{env_id}").status_code == 200
    deletion, deletion_id = api.published.tasks[-1]
    model = copy.deepcopy(body)
    api.store.reports.add(contract.report_body(env_id, "environment", "no", "error", env_id),
                          "r1")
    api.store.results.apply(contract.result_body(model), deletion_id)
    api.store.notifications.close()
    assert sent(api, 5)[3:] == [("INFO", "environment.delete.start"),
                                ("ERROR", "environment.delete.error")]
    assert api.recorder.sent[4][2]["status"] == "completed_w_errors"
    assert "deleted_at" not in api.recorder.sent[4][2]
    assert api.client.get(f"/environments/{env_id}").json()["status"] == "delete failure"


def test_a_notification_names_the_request_that_caused_it(api):
    """Its context's request_id is the x-openstack-request-id of the answer."""
    answer = api.client.post("/environments", json={"name": "traced"})
    assert sent(api, 1) == [("INFO", "environment.create.end")]
    request_id = answer.headers["x-openstack-request-id"]
    assert request_id.startswith("req-")
    assert api.recorder.contexts[0]["request_id"] == request_id
