"""The conductor daemon on a real broker, with simulated stacks and a stand-in agent."""
from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from fornace.common import contract
from fornace.common.broker import Broker
from fornace.conductor.daemon import Conductor, ConductorSettings
from fornace.conductor.executors.simulator import SimulatedCloud, SimulatedStacks
from fornace.conductor.session import Settings
from services import amqp_url

DATA = Path(__file__).resolve().parents[2] / "data"


def model(env_id: str) -> dict:
    return {"id": env_id, "name": "daemon", "services": [{
        "id": "svc1", "name": "site", "type": "linuxWebServer", "unitNamingPattern": "web#",
        "osImage": {"name": "debian"}, "adminPassword": "Secret-pass-1",
        "units": [{"id": "u1", "name": "site_instance_0"}, {"id": "u2", "name": "site_instance_1"}]}]}


class StandInAgents:
    """Answers every plan sent to the given units with an "ok" result."""

    def __init__(self, url: str, env_id: str, units: list[str], silent: set[str] = frozenset(),
                 service: str = "svc1"):
        self.url, self.env_id, self.units, self.silent = url, env_id, units, silent
        self.service = service
        self.stop = threading.Event()
        self.plans: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with Broker(self.url) as broker:
            while not self.stop.is_set():
                for unit in self.units:
                    queue = contract.agent_queue(self.env_id, self.service, unit)
                    for plan, plan_id in broker.drain(queue, timeout=0.05):
                        self.plans.append(unit)
                        if unit in self.silent:
                            continue
                        result = {"IsException": False, "Result": [
                            {"IsException": False, "Result": ["done"]}
                            for _ in plan["Commands"]]}
                        broker.publish(contract.results_queue(self.env_id), result, plan_id)


@pytest.fixture(params=["memory", "rabbitmq"])
def conductor(request):
    url = "memory://" if request.param == "memory" else amqp_url()
    stacks_seen = []

    def stacks(task):
        stacks_seen.append(task.environment_id)
        return SimulatedCloud().executors()[0]

    daemon = Conductor(ConductorSettings(broker_url=url, data_dir=DATA, max_environments=2,
                                         engine=Settings(agent_timeout=3)), stacks)
    daemon.start()
    assert daemon.wait_ready()
    yield url, daemon
    daemon.shutdown()


def collect(broker: Broker, queue: str, until, timeout: float = 20.0) -> list:
    found = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until(found):
        found.extend(broker.drain(queue, timeout=0.2))
    return found


def test_task_to_result_with_reports(conductor):
    url, _ = conductor
    env_id = "d" + uuid.uuid4().hex[:8]
    agents = StandInAgents(url, env_id, ["u1", "u2"])
    with Broker(url) as broker:
        broker.publish(contract.TASKS, {"text": "not a task"}, "bad-" + env_id)  # dropped
        broker.publish(contract.TASKS, contract.task_body(model(env_id), "tok", "t1"),
                       "task-" + env_id)
        results = collect(broker, contract.RESULTS,
                          lambda found: any(m == "task-" + env_id for _, m in found))
        reports = collect(broker, contract.REPORTS, lambda found: len(found) >= 8, 5)
    agents.stop.set()
    body, message_id = next((b, m) for b, m in results if m == "task-" + env_id)
    final = contract.parse_result(body)
    assert "token" not in final and "temp" not in final
    units = final["services"][0]["units"]
    assert [u["state"] for u in units] == [{"hostname": "web1", "address": None, "siteDeployed": True},
                                           {"hostname": "web2", "address": None, "siteDeployed": True}]
    assert sorted(agents.plans) == ["u1", "u2"]
    ours = [(b, m) for b, m in reports if b["environment_id"] == env_id]
    texts = [b["text"] for b, _ in ours]
    assert "Web site deployed on web1: done" in texts
    assert all(m.startswith("task-" + env_id + "-report-") for _, m in ours)
    assert len({m for _, m in ours}) == len(ours)


def test_silent_agent_times_out_and_the_deployment_ends(conductor):
    url, _ = conductor
    env_id = "d" + uuid.uuid4().hex[:8]
    agents = StandInAgents(url, env_id, ["u1", "u2"], silent={"u2"})
    with Broker(url) as broker:
        broker.publish(contract.TASKS, contract.task_body(model(env_id), None, "t1"),
                       "task-" + env_id)
        results = collect(broker, contract.RESULTS,
                          lambda found: any(m == "task-" + env_id for _, m in found), 30)
        reports = collect(broker, contract.REPORTS, lambda found: False, 1)
    agents.stop.set()
    assert any(m == "task-" + env_id for _, m in results)
    errors = [b["text"] for b, _ in reports
              if b["environment_id"] == env_id and b["level"] == "error"]
    assert any("web2" in text and "no answer from the agent" in text for text in errors)


def test_reports_are_sent_while_the_deployment_runs(conductor):
    url, _ = conductor
    env_id = "d" + uuid.uuid4().hex[:8]
    agents = StandInAgents(url, env_id, ["u1", "u2"], silent={"u1", "u2"})  # it hangs on them
    with Broker(url) as broker:
        broker.publish(contract.TASKS, contract.task_body(model(env_id), None, "t1"),
                       "task-" + env_id)
        early = collect(broker, contract.REPORTS, lambda found: any(
            b["environment_id"] == env_id and b["text"].startswith("Deploying the web site")
            for b, _ in found), 10)
        done_early = [m for _, m in broker.drain(contract.RESULTS, timeout=0.1)]
        results = collect(broker, contract.RESULTS,
                          lambda found: any(m == "task-" + env_id for _, m in found), 30)
    agents.stop.set()
    texts = [b["text"] for b, _ in early if b["environment_id"] == env_id]
    assert "Creating instance web1 (site_instance_0)" in texts
    assert "task-" + env_id not in done_early        # the deployment was still running
    assert any(m == "task-" + env_id for _, m in results)
    assert not any("Secret-pass-1" in str(b) for b, _ in early)


def test_a_task_redelivered_while_it_runs_here_is_not_run_twice():
    """RabbitMQ requeues a task when the connection that took it breaks, while its
    handler still runs; a second consumer thread taking the copy waits for it."""
    from fornace.common.broker import Delivery

    release = threading.Event()
    runs = []

    class SlowStacks(SimulatedStacks):
        def apply(self, request):
            runs.append(request.stack_name)
            release.wait(10)
            return {}

    env_id = "d" + uuid.uuid4().hex[:8]
    daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA,
                                         engine=Settings(agent_timeout=1)),
                       lambda task: SlowStacks(SimulatedCloud()))
    body = contract.task_body({"id": env_id, "name": "x", "services": [{
        "id": "s1", "name": "site", "type": "linuxWebServer", "units": [
            {"id": "u1", "name": "site_instance_0"}]}]}, None, "t1")
    delivery = Delivery(message_id="task-" + env_id, queue=contract.TASKS)
    threads = [threading.Thread(target=daemon.handle_task, args=(body, delivery))
               for _ in range(2)]
    threads[0].start()
    deadline = time.monotonic() + 10
    while not runs and time.monotonic() < deadline:
        time.sleep(0.01)
    threads[1].start()
    threads[1].join(0.5)
    assert threads[1].is_alive()          # the copy waits for the run ...
    release.set()
    for thread in threads:
        thread.join(30)
    assert not any(t.is_alive() for t in threads)    # ... and ends with it
    assert runs == [f"e{env_id}"]
