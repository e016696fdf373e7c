"""The broker on a RabbitMQ cluster, against the RabbitMQ of this machine (a
virtual host of each test's own): ``[broker] queue_type = quorum`` declares
every durable queue as a quorum queue, a queue of the other type is named in a
clear error, and a failover URL reaches the first host that answers, however
far down the list it is."""
from __future__ import annotations

import logging
import threading
import uuid

import pytest

from fornace.common.broker import Broker, QueueTypeError
from fornace.common.consumer import Consumer
from fornace.common.contract import REPORTS, RESULTS, TASKS
from services import rabbitmqctl
from waiting import wait_for


@pytest.fixture
def vhost(amqp_vhost):
    return amqp_vhost


def queue_types(url: str) -> dict[str, str]:
    name = url.rsplit("/", 1)[1]
    out = rabbitmqctl("list_queues", "-p", name, "name", "type", "--quiet", "--no-table-headers")
    return dict(line.split() for line in out.splitlines() if line.strip())


def dead_url(url: str) -> str:
    """``url`` with a port nothing listens on (a node that is down)."""
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    head, rest = url.split("@", 1)
    return f"{head}@127.0.0.1:{port}/{rest.split('/', 1)[1]}"


def test_quorum_declares_the_tasks_results_reports_and_agent_queues_as_quorum(vhost):
    agent_queue = f"e{uuid.uuid4().hex[:8]}-svc-unit"
    with Broker(vhost, queue_type="quorum") as broker:
        for queue in (TASKS, RESULTS, REPORTS, agent_queue):
            broker.publish(queue, {"n": 1})
        with broker.inbox("-execution-results-eabc") as inbox:
            inbox.open()
        assert [body for body, _ in broker.drain(agent_queue, timeout=0.5)] == [{"n": 1}]
    assert queue_types(vhost) == {TASKS: "quorum", RESULTS: "quorum", REPORTS: "quorum",
                                  agent_queue: "quorum", "-execution-results-eabc": "quorum"}


def test_classic_is_the_default_and_declares_as_before(vhost):
    with Broker(vhost) as broker:
        broker.publish(TASKS, {"n": 1})
    assert queue_types(vhost) == {TASKS: "classic"}


def test_a_queue_of_the_other_type_is_named_with_the_option(vhost, caplog):
    """A broker that already has ``tasks`` as a classic queue: publishing with
    queue_type = quorum fails naming the queue, both types and the option, and
    a consumer logs the same error (and goes on trying) instead of a bare
    PRECONDITION_FAILED."""
    with Broker(vhost) as classic:
        classic.publish(TASKS, {"n": 1})
    with Broker(vhost, queue_type="quorum") as quorum:
        with pytest.raises(QueueTypeError) as caught:
            quorum.publish(TASKS, {"n": 2})
    message = str(caught.value)
    assert message.startswith("queue 'tasks' exists on the broker as a classic queue, but "
                              "[broker] queue_type is quorum"), message
    assert "rabbitmqctl delete_queue" in message

    caplog.set_level(logging.ERROR, logger="fornace.common.consumer")
    stop = threading.Event()
    consumer = Consumer(Broker(vhost, queue_type="quorum"), {TASKS: lambda b, d: None}, stop)
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: any("queue 'tasks' exists on the broker as a classic queue, but "
                             "[broker] queue_type is quorum" in r.getMessage()
                             for r in caplog.records), "the consumer to log the mismatch")
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()


def test_a_consumer_and_an_inbox_reach_the_third_host_when_the_first_two_are_down(vhost):
    """kombu's connect() tries two hosts of a failover URL; every host must be tried."""
    url = f"{dead_url(vhost)};{dead_url(vhost)};{vhost}"
    got: list = []
    stop = threading.Event()
    consumer = Consumer(Broker(url, queue_type="quorum"),
                        {TASKS: lambda body, delivery: got.append(body)}, stop)
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        assert consumer.ready.wait(30), "the consumer never subscribed"
        with Broker(url, queue_type="quorum") as broker:
            broker.publish(TASKS, {"through": "host 3"})
            wait_for(lambda: got == [{"through": "host 3"}], "the task through host 3")
            broker.publish("-execution-results-ex", {"answer": 1})
            with broker.inbox("-execution-results-ex") as inbox:
                assert inbox.get(timeout=30)[0] == {"answer": 1}
    finally:
        stop.set()
        thread.join(30)
