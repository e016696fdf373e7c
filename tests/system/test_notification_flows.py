"""Notifications of real flows: the API and a conductor on simulated stacks and
stand-in agents, environments created, deployed (a deployment that succeeds,
one whose stack fails), run an action, abandoned and deleted.

In memory the notifications are read as the API hands them to its notifier;
on RabbitMQ (a virtual host of the test's own) as a consumer such as
Ceilometer reads them: ``messagingv2`` messages on the ``fornace`` exchange's
``notifications.info`` and ``notifications.error`` queues.  Either way the
payloads have the keys of the example of doc/source/admin/notifications.rst.
"""
from __future__ import annotations

import json
import re
import textwrap
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fornace.api.server import ApiService
from fornace.cli.main import build_conf
from fornace.common import notifications
from fornace.common.notifications import GROUP, Notifications
from fornace.conductor.daemon import Conductor, ConductorSettings
from fornace.conductor.executors.simulator import Fault, SimulatedCloud
from fornace.conductor.session import Settings
from standins import RecordingStacks, StandInAgents
from waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data"
DOC = ROOT / "doc" / "source" / "admin" / "notifications.rst"
HEADERS = {"X-Tenant-Id": "tenant-a", "X-User-Id": "user-a"}
PASSWORD = "Sup3r-Secret-pw!"
BROKEN = "broken"   # environments named so have a stack that fails


STUCK = "stuck"     # environments named so have a stack that answers once released
RELEASE = threading.Event()


def stacks_for(task):
    """Simulated stacks; those of a broken environment fail every instance,
    those of a stuck one wait for :data:`RELEASE`."""
    name = task.model.get("name", "")
    if name.startswith(STUCK):
        return RecordingStacks([], gate=RELEASE, entered=threading.Event())
    failures = [Fault("LinuxInstance")] if name.startswith(BROKEN) else []
    return SimulatedCloud(failures=failures).executors()[0]


class Recorder:
    """The API's notifier in memory: every notification as it is handed over."""

    publisher_id = "fornace.api.test"

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.lock = threading.Lock()

    def _record(self, priority: str, ctxt: dict, event_type: str, payload: dict) -> None:
        with self.lock:
            self.sent.append({"priority": priority.upper(), "event_type": event_type,
                              "payload": payload, "ctxt": ctxt,
                              "raw": json.dumps([ctxt, payload])})

    def info(self, ctxt, event_type, payload):
        self._record("info", ctxt, event_type, payload)

    def error(self, ctxt, event_type, payload):
        self._record("error", ctxt, event_type, payload)

    def messages(self) -> list[dict]:
        with self.lock:
            return list(self.sent)


class RabbitConsumer:
    """What a consumer of the ``notifications`` topic gets from RabbitMQ."""

    def __init__(self, url: str) -> None:
        import kombu

        self.connection = kombu.Connection(url)
        self.channel = self.connection.channel()
        self.sent: list[dict] = []

    def messages(self) -> list[dict]:
        from amqp.exceptions import NotFound
        from kombu import Queue

        for priority in ("info", "error"):
            queue = Queue(f"notifications.{priority}", no_declare=True)(self.channel)
            while True:
                try:
                    message = queue.get(no_ack=True)
                except NotFound:   # not declared yet: nothing was sent there
                    self.channel = self.connection.channel()   # the broker closed that one
                    break
                if message is None:
                    break
                envelope = json.loads(message.body)
                assert envelope["oslo.version"] == "2.0"   # messagingv2
                inner = json.loads(envelope["oslo.message"])
                inner["raw"] = message.body if isinstance(message.body, str) \
                    else message.body.decode()
                inner["queue"] = f"notifications.{priority}"
                self.sent.append(inner)
        return list(self.sent)

    def close(self) -> None:
        self.connection.release()


@pytest.fixture(params=["memory", "rabbitmq"])
def world(request, tmp_path):
    """(API client, broker URL, what reads the notifications)."""
    rabbit = request.param == "rabbitmq"
    url = request.getfixturevalue("amqp_vhost") if rabbit else "memory://"
    conf = build_conf()
    conf(["api"], default_config_files=[])
    conf.set_override("url", url, group="broker")
    if rabbit:   # no transport_url: they go to [broker] url, the private vhost
        notifications.register(conf)   # as the API does when it starts
        conf.set_override("driver", ["messagingv2"], group=GROUP)
    api = ApiService(conf, f"sqlite:///{tmp_path / 'notes.sqlite'}")
    if rabbit:
        assert api.notifications.enabled
        assert api.notifications.publisher_id.startswith("fornace.api.")
        reader = RabbitConsumer(url)
    else:
        assert not api.notifications.enabled    # off unless configured
        reader = Recorder()
        api.store.notifications = Notifications(reader)
    assert api.start_consumers().ready.wait(10)
    daemon = Conductor(ConductorSettings(broker_url=url, data_dir=DATA, max_environments=2,
                                         engine=Settings(agent_timeout=5)), stacks_for)
    daemon.start()
    assert daemon.wait_ready()
    RELEASE.clear()
    yield TestClient(api.app, headers=HEADERS), url, reader
    RELEASE.set()
    daemon.shutdown()
    api.store.notifications.close()
    api.stop()
    if rabbit:
        reader.close()


def deploy(client, url, name):
    """Create ``name``, add a web server of two units (its admin password
    set), deploy it; (environment id, session id, agents)."""
    env = client.post("/environments", json={"name": name}).json()
    session = client.post(f"/environments/{env['id']}/configure").json()["id"]
    service = client.post(f"/environments/{env['id']}/services/", headers={
        "X-Configuration-Session": session}, json={
        "name": "site", "type": "linuxWebServer", "unitNamingPattern": "web#",
        "adminPassword": PASSWORD, "osImage": {"name": "debian"}, "units": [{}, {}]}).json()
    agents = StandInAgents(url, env["id"], [u["id"] for u in service["units"]],
                           service=service["id"])
    response = client.post(f"/environments/{env['id']}/sessions/{session}/deploy")
    assert response.status_code == 200, response.text
    return env["id"], session, agents


def events_of(reader, env_id, count):
    """The first ``count`` notifications of environment ``env_id``, in order."""
    def enough():
        found = [m for m in reader.messages() if m["payload"].get("environment_id") == env_id]
        return found if len(found) >= count else None
    found = wait_for(enough, timeout=120)
    assert found, [m["event_type"] for m in reader.messages()
                   if m["payload"].get("environment_id") == env_id]
    return found[:count]


def documented_keys(event_type: str) -> set[str]:
    """The keys of the example payload of ``event_type`` in the documentation."""
    text = DOC.read_text()
    after = text[text.index(f".. example: {event_type}\n"):]
    lines = after[after.index(".. code-block:: json\n"):].splitlines()[2:]
    block = []
    for line in lines:
        if line and not line.startswith("   "):
            break
        block.append(line)
    return set(json.loads(textwrap.dedent("\n".join(block)))["payload"])


def test_a_deployment_that_succeeds_then_a_deletion(world):
    client, url, reader = world
    env_id, session, agents = deploy(client, url, "shop")
    created, started, ended = events_of(reader, env_id, 3)
    assert created["event_type"] == "environment.create.end"
    assert created["payload"]["environment_name"] == "shop"
    assert (started["event_type"], started["priority"]) == ("environment.deploy.start", "INFO")
    assert (ended["event_type"], ended["priority"]) == ("environment.deploy.end", "INFO")
    job = client.get(f"/environments/{env_id}/deployments").json()["deployments"][0]
    assert started["payload"]["job_id"] == ended["payload"]["job_id"] == job["id"]
    assert started["payload"]["status"] == "running" and started["payload"]["finished_at"] is None
    assert ended["payload"]["status"] == job["state"] == "success"
    assert ended["payload"]["finished_at"] >= ended["payload"]["started_at"]
    for message in (created, started, ended):
        assert message["payload"]["tenant_id"] == message["payload"]["project_id"] == "tenant-a"
        assert message["payload"]["user_id"] == "user-a"   # the session's user for the end
    assert set(ended["payload"]) == documented_keys("environment.deploy.end")
    assert set(created["payload"]) == documented_keys("environment.create.end")

    # an action, then the deletion: a job of its own, ended by its result
    assert client.post(f"/environments/{env_id}/actions/check", json={}).status_code == 202
    action_start, action_end = events_of(reader, env_id, 5)[3:]
    assert (action_start["event_type"], action_end["event_type"]) == (
        "environment.action.start", "environment.action.end")
    assert action_end["payload"]["action"] == "check"
    wait_for(lambda: client.get(f"/environments/{env_id}").json()["status"] == "ready",
             "the environment ready after its check")
    assert client.delete(f"/environments/{env_id}").status_code == 200
    delete_start, delete_end = events_of(reader, env_id, 7)[5:]
    assert delete_start["event_type"] == "environment.delete.start"
    assert delete_end["event_type"] == "environment.delete.end"
    assert delete_end["payload"]["job_id"] == delete_start["payload"]["job_id"]
    assert delete_end["payload"]["deleted_at"] and delete_end["payload"]["abandoned"] is False
    assert set(delete_end["payload"]) == documented_keys("environment.delete.end")
    assert client.get(f"/environments/{env_id}").status_code == 404
    agents.stop.set()
    for message in events_of(reader, env_id, 7):
        assert PASSWORD not in message["raw"]
        if "publisher_id" in message:     # as RabbitMQ carried it
            assert re.fullmatch(r"fornace\.api\..+", message["publisher_id"])
            assert message["queue"] == "notifications.info"


def test_a_deployment_that_fails(world):
    client, url, reader = world
    env_id, session, agents = deploy(client, url, f"{BROKEN}-shop")
    created, started, failed = events_of(reader, env_id, 3)
    assert started["event_type"] == "environment.deploy.start"
    assert (failed["event_type"], failed["priority"]) == ("environment.deploy.error", "ERROR")
    assert failed["payload"]["status"] == "completed_w_errors"
    assert failed["payload"]["job_id"] == started["payload"]["job_id"]
    assert client.get(f"/environments/{env_id}").json()["status"] == "deploy failure"
    assert set(failed["payload"]) == documented_keys("environment.deploy.error")
    if "queue" in failed:
        assert failed["queue"] == "notifications.error"
    assert PASSWORD not in failed["raw"]
    agents.stop.set()


def test_environments_forgotten_at_once(world):
    """Never deployed, or abandoned: ``environment.delete.end`` without a job."""
    client, url, reader = world
    fresh = client.post("/environments", json={"name": "fresh"}).json()["id"]
    assert client.delete(f"/environments/{fresh}").status_code == 200
    created, deleted = events_of(reader, fresh, 2)
    assert deleted["event_type"] == "environment.delete.end"
    assert deleted["payload"]["job_id"] is None and deleted["payload"]["abandoned"] is False

    env_id, session, agents = deploy(client, url, "given-up")
    events_of(reader, env_id, 2)     # created, deploy.start (it may end meanwhile)
    assert client.delete(f"/environments/{env_id}?abandon=true").status_code == 200
    gone = wait_for(lambda: [m for m in reader.messages()
                             if m["payload"].get("environment_id") == env_id
                             and m["event_type"] == "environment.delete.end"],
                    "environment.delete.end of the abandoned environment", timeout=120)
    assert len(gone) == 1 and gone[0]["payload"]["abandoned"] is True
    assert gone[0]["payload"]["user_id"] == "user-a"
    agents.stop.set()


def test_an_abandoned_job_ends_with_an_error(world):
    """A job given up (its stack never answers) ends as ``abandoned``:
    ``environment.deploy.error`` says so, with who gave it up."""
    client, url, reader = world
    env = client.post("/environments", json={"name": STUCK}).json()
    session = client.post(f"/environments/{env['id']}/configure").json()["id"]
    client.post(f"/environments/{env['id']}/services/", headers={
        "X-Configuration-Session": session}, json={
        "name": "site", "type": "linuxWebServer", "osImage": {"name": "debian"},
        "units": [{}]})
    assert client.post(f"/environments/{env['id']}/sessions/{session}/deploy").status_code \
        == 200
    events_of(reader, env["id"], 2)
    response = client.post(f"/environments/{env['id']}/abandon",
                           headers={"X-User-Id": "user-b"})
    assert response.status_code == 200, response.text
    abandoned = events_of(reader, env["id"], 3)[2]
    assert (abandoned["event_type"], abandoned["priority"]) == (
        "environment.deploy.error", "ERROR")
    assert abandoned["payload"]["status"] == "abandoned"
    assert abandoned["payload"]["user_id"] == "user-b"
