"""Notifications (``fornace.common.notifications``): off unless configured,
where they go, what their payloads hold (never a secret), sent in order from
a thread of their own that no broker out of reach can hold up."""
from __future__ import annotations

import datetime
import json
import logging
import socket
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest
from oslo_config import cfg

from fornace.common import notifications
from fornace.common.notifications import (GROUP, JobFields, Notifications, NotificationsError,
                                          ended_event, from_conf, job_event, rabbit_url)
from fornace.common.secrets import is_secret_key
from waiting import wait_for

AMQP = "amqp://fornace:pw@mq1:5672/fornace"
CREATED = datetime.datetime(2026, 3, 1, 12, 0, 0, 250000)
ENV = SimpleNamespace(id="e1", name="shop", tenant_id="t1", created=CREATED,
                      description={"services": [{"adminPassword": "Sup3rSecret!"}]})


def conf_with(**settings) -> cfg.ConfigOpts:
    """A configuration with the notification options, ``settings`` set in
    ``[oslo_messaging_notifications]`` (``default_transport_url``: ``[DEFAULT]``)."""
    conf = cfg.ConfigOpts()
    notifications.register(conf)
    conf([], default_config_files=[], default_config_dirs=[])
    if "default_transport_url" in settings:
        conf.set_override("transport_url", settings.pop("default_transport_url"))
    for name, value in settings.items():
        conf.set_override(name, value, group=GROUP)
    return conf


# -- on or off ---------------------------------------------------------------------

def test_they_are_off_unless_a_driver_is_set():
    conf = conf_with()
    assert conf[GROUP].driver == [] and conf[GROUP].topics == ["notifications"]
    assert conf[GROUP].retry == notifications.RETRY   # oslo.messaging's -1 never ends
    off = from_conf(conf, "api", AMQP)
    assert not off.enabled and off.publisher_id is None
    off.emit("environment.create.end", {"environment_id": "e1"})   # nothing, no error
    off.close()
    assert not from_conf(conf_with(driver=["noop"]), "api", AMQP).enabled


PEEK = """
import sys
from oslo_config import cfg
from fornace.common.notifications import from_conf
conf = cfg.ConfigOpts()
conf(sys.argv[1:])
print(from_conf(conf, "api", "amqp://guest:guest@127.0.0.1:5672//").enabled,
      "oslo_messaging" in sys.modules)
"""


@pytest.mark.parametrize("driver, expected", [(None, "False False"), ("noop", "False False"),
                                              ("messagingv2", "True True")])
def test_oslo_messaging_is_loaded_only_when_a_config_file_sets_a_driver(tmp_path, driver,
                                                                         expected):
    """A service whose files set no driver starts without importing oslo.messaging."""
    config = tmp_path / "fornace.conf"
    config.write_text(f"[{GROUP}]\ndriver = {driver}\n" if driver else "")
    found = subprocess.run([sys.executable, "-c", PEEK, "--config-file", str(config)],
                           capture_output=True, text=True, check=True)
    assert found.stdout.split() == expected.split()


@pytest.mark.parametrize("broker", ["memory://", "filesystem:///var/lib/fornace/bus",
                                    "amqps://fornace:pw@mq1:5671/fornace"])
def test_a_broker_no_consumer_shares_leaves_them_off_saying_what_to_set(broker, caplog):
    caplog.set_level(logging.WARNING, logger=notifications.__name__)
    assert not from_conf(conf_with(driver=["messagingv2"]), "api", broker).enabled
    [record] = [r for r in caplog.records if r.name == notifications.__name__]
    assert "[oslo_messaging_notifications] transport_url" in record.getMessage()
    assert "pw" not in record.getMessage()


@pytest.mark.parametrize("settings, wanted", [
    ({}, "rabbit://fornace:pw@mq1:5672/fornace"),          # [broker] url
    ({"default_transport_url": "rabbit://a:b@mq9:5672/x"}, "rabbit://a:b@mq9:5672/x"),
    ({"default_transport_url": "rabbit://a:b@mq9:5672/x",
      "transport_url": "rabbit://n:m@mq7:5672/notes"}, "rabbit://n:m@mq7:5672/notes"),
])
def test_where_they_go_first_found(settings, wanted):
    assert notifications.transport_url(conf_with(**settings), AMQP) == wanted


def test_the_broker_url_as_a_transport_url():
    assert rabbit_url("amqp://u:p%40ss@mq1:5672/vh;amqp://u:p%40ss@mq2/vh") == \
        "rabbit://u:p%40ss@mq1:5672,u:p%40ss@mq2/vh"
    assert rabbit_url("amqp://guest:guest@127.0.0.1:5672") == \
        "rabbit://guest:guest@127.0.0.1:5672/"
    assert rabbit_url("memory://") is None
    assert notifications.masked("rabbit://u:p%40ss@mq1:5672,v:w@mq2/vh") == \
        "rabbit://u:**@mq1:5672,v:**@mq2/vh"


@pytest.mark.parametrize("url", ["not a url", "carrier-pigeon://u:hunter22@loft/"])
def test_a_transport_url_oslo_messaging_refuses_names_the_option(url):
    with pytest.raises(NotificationsError) as caught:
        from_conf(conf_with(driver=["messagingv2"], transport_url=url), "api", "memory://")
    assert "[oslo_messaging_notifications] transport_url" in str(caught.value)
    assert "hunter22" not in str(caught.value)


# -- the events and their payloads ----------------------------------------------------

def test_job_events_by_action_and_outcome():
    assert job_event("deploy", "start") == "environment.deploy.start"
    assert job_event("delete", "start") == "environment.delete.start"
    assert job_event("scale", "start") == "environment.action.start"
    assert ended_event("deploy", "success") == "environment.deploy.end"
    assert ended_event("deploy", "completed_w_errors") == "environment.deploy.error"
    assert ended_event("delete", "success") == "environment.delete.end"
    assert ended_event("heal", "refused") == "environment.action.error"
    assert ended_event("plan", "abandoned") == "environment.action.error"
    every = {job_event(action, phase) for action in ("deploy", "delete", "check")
             for phase in ("start", "end", "error")} | {notifications.ENVIRONMENT_CREATE_END}
    assert every == set(notifications.EVENTS)


def test_payloads():
    assert notifications.environment_payload(ENV, "u1") == {
        "environment_id": "e1", "environment_name": "shop", "tenant_id": "t1",
        "project_id": "t1", "user_id": "u1", "created_at": "2026-03-01T12:00:00.250000Z"}
    job = JobFields("j1", "scale", "success", CREATED,
                    datetime.datetime(2026, 3, 1, 12, 5, tzinfo=datetime.timezone.utc))
    payload = notifications.job_payload(ENV, job, None)
    assert payload["job_id"] == "j1" and payload["action"] == "scale"
    assert payload["status"] == "success" and payload["user_id"] is None
    assert payload["started_at"] == "2026-03-01T12:00:00.250000Z"
    assert payload["finished_at"] == "2026-03-01T12:05:00.000000Z"
    deleted = notifications.deleted_payload(ENV, "u2", CREATED, abandoned=True)
    assert deleted["deleted_at"] == deleted["created_at"] and deleted["abandoned"] is True
    assert deleted["job_id"] is None and deleted["action"] == "delete"


def test_no_payload_carries_a_secret():
    """Payloads are built of named fields only: an environment's model (its
    passwords) never reaches one."""
    job = JobFields("j1", "deploy", "running", CREATED)
    for payload in (notifications.environment_payload(ENV, "u1"),
                    notifications.job_payload(ENV, job, "u1"),
                    notifications.deleted_payload(ENV, "u1", CREATED)):
        assert not [key for key in payload if is_secret_key(key)]
        assert "Sup3rSecret!" not in json.dumps(payload)
    assert "token" not in json.dumps(notifications.context("u1", "t1", "req-1"))


# -- sending ------------------------------------------------------------------------

def test_sent_in_order_through_oslo_messaging(caplog):
    """oslo.messaging's ``log`` driver on its in-process transport: what a
    broker would carry, one record per notification."""
    caplog.set_level(logging.INFO, logger="oslo.messaging.notification")
    sender = from_conf(conf_with(driver=["log"], transport_url="fake://"), "api", None,
                       host="node-1")
    assert sender.enabled and sender.publisher_id == "fornace.api.node-1"
    sender.emit("environment.create.end", {"environment_id": "e1"})
    sender.emit("environment.deploy.start", {"environment_id": "e1", "job_id": "j1"})
    sender.emit("environment.deploy.error", {"environment_id": "e1", "job_id": "j1"},
                error=True, ctxt=notifications.context("u1", "t1"))
    sender.close()
    sent = [json.loads(r.getMessage()) for r in caplog.records
            if r.name.startswith("oslo.messaging.notification.")]
    assert [(m["event_type"], m["priority"]) for m in sent] == [
        ("environment.create.end", "INFO"), ("environment.deploy.start", "INFO"),
        ("environment.deploy.error", "ERROR")]
    assert {m["publisher_id"] for m in sent} == {"fornace.api.node-1"}
    assert sent[2]["payload"] == {"environment_id": "e1", "job_id": "j1"}


class GatedNotifier:
    """A notifier whose first send waits for ``gate``: a broker that does not answer."""

    publisher_id = "fornace.api.test"

    def __init__(self) -> None:
        self.gate, self.entered, self.sent = threading.Event(), threading.Event(), []

    def info(self, ctxt, event_type, payload):
        self.entered.set()
        self.gate.wait(60)
        self.sent.append(event_type)

    error = info


def test_a_broker_that_does_not_answer_holds_up_no_caller(caplog):
    notifier = GatedNotifier()
    sender = Notifications(notifier, queue_size=2)
    sender.emit("environment.create.end", {})
    assert notifier.entered.wait(10)          # the sender thread is stuck in it
    for number in range(4):                   # the callers are not: 2 wait, 2 dropped
        sender.emit(f"environment.action.start.{number}", {})
    assert "2 wait for the broker" in caplog.text
    notifier.gate.set()
    sender.close()
    assert notifier.sent == ["environment.create.end", "environment.action.start.0",
                             "environment.action.start.1"]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_broker_out_of_reach_is_logged_and_the_next_ones_still_go(caplog):
    """oslo.messaging retries ``retry`` times, logs the notification it could
    not deliver, and the sender goes on with the next."""
    caplog.set_level(logging.ERROR)
    url = f"rabbit://guest:hunter22@127.0.0.1:{_closed_port()}/"
    sender = from_conf(conf_with(driver=["messagingv2"], transport_url=url, retry=0),
                       "conductor", None)
    sender.emit("environment.create.end", {"environment_id": "e1"})
    sender.emit("environment.delete.end", {"environment_id": "e1"})
    assert wait_for(lambda: sum("Could not send notification" in r.getMessage()
                                for r in caplog.records) == 2, timeout=60)
    sender.close()
    assert "hunter22" not in caplog.text
