"""A gone agent is noticed in seconds, not at the end of agent_timeout
(RabbitMQ's consumer counts; the folder broker's consumer files)."""
from __future__ import annotations

import threading
import time

import pytest

from fornace.common import contract
from fornace.common.broker import Broker
from fornace.conductor.executors.agents import AmqpAgents
from fornace.conductor.executors.base import PlanRequest
from waiting import wait_for


def request(unit: str) -> PlanRequest:
    return PlanRequest(service="s1", unit=unit, template="T", plan={"ID": f"plan-{unit}",
                                                                     "Commands": []})


@pytest.fixture(params=["rabbitmq", "folder"])
def broker_url(request, tmp_path):
    if request.param == "folder":
        return f"filesystem://{tmp_path}/broker"
    return request.getfixturevalue("amqp_vhost")


def test_an_agent_that_stops_listening_fails_its_plan_in_seconds(broker_url):
    """Regression: a killed agent left its plan waiting the whole agent_timeout
    (an hour by default) with no error; on the folder broker (the local cloud
    without RabbitMQ) nothing could tell at all."""
    took, stop = threading.Event(), threading.Event()

    def agent() -> None:   # listens, takes the plan, dies without answering
        with Broker(broker_url) as broker, broker.inbox(
                contract.agent_queue("e1", "s1", "u1")) as inbox:
            inbox.open()
            while not stop.is_set():
                if inbox.get(timeout=0.2) is not None:
                    took.set()
                    return

    thread = threading.Thread(target=agent, daemon=True)
    thread.start()
    with Broker(broker_url) as broker:
        agents = AmqpAgents(broker, "e1", default_timeout=120, poll=0.1, absent_after=1.0)
        queue = contract.agent_queue("e1", "s1", "u1")
        wait_for(lambda: broker.consumers([queue])[queue],
                 "the agent to listen before the plan goes")
        [reply] = agents.run([request("u1")])
    stop.set()
    assert took.is_set()
    # gone, not timed out at agent_timeout (how soon: tools/bench_startup.py)
    assert not reply.timed_out
    assert reply.result["IsException"] and reply.result["Result"][0] == "AgentGone"
    assert "unit u1 stopped listening" in reply.result["Result"][1]


def test_an_agent_never_seen_is_waited_for(amqp_vhost):
    """A new VM's agent is not listening yet: that is no reason to fail."""
    with Broker(amqp_vhost) as broker:
        agents = AmqpAgents(broker, "e1", default_timeout=2.5, poll=0.1, absent_after=0.5)
        started = time.monotonic()
        [reply] = agents.run([request("u2")])
    assert reply.timed_out and time.monotonic() - started >= 2.5   # the whole timeout waited


def test_transports_that_cannot_count_consumers_are_not_watched():
    assert Broker("memory://").consumers(["q"]) is None


def test_a_plan_nobody_ever_listens_for_fails_after_the_boot_timeout(broker_url):
    """A VM that never boots (or an agent reading another queue) no longer leaves
    its plan waiting the whole agent_timeout in silence."""
    with Broker(broker_url) as broker:
        agents = AmqpAgents(broker, "e1", default_timeout=120, poll=0.1, absent_after=30,
                            boot_timeout=1.0)
        [reply] = agents.run([request("u3")])
    assert not reply.timed_out       # failed at the boot timeout, not at agent_timeout
    assert reply.result["IsException"] and reply.result["Result"][0] == "NoAgent"
    assert reply.result["Result"][1].startswith(
        f"no agent is listening on {contract.agent_queue('e1', 's1', 'u3')} (unit u3) ")
