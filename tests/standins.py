"""Stand-ins for the agents and the cloud of a deployment, and a task to deploy,
for tests of the conductor and the flow."""
from __future__ import annotations

import threading

from fornace.common import contract
from fornace.common.broker import Broker
from fornace.conductor.executors.simulator import SimulatedCloud, SimulatedStacks


def reports_in(messages: list) -> list:
    """``task-reports`` messages ``[(body, message id)]`` as the reports they
    hold: a pack (contract 1.12) as its reports, each with its own id."""
    return [report for body, message_id in messages
            for report in contract.unpack_reports(body, message_id)]


def drain_reports(broker: Broker, timeout: float) -> list:
    """The reports waiting on ``task-reports`` (:meth:`Broker.drain`), unpacked."""
    return reports_in(broker.drain(contract.REPORTS, timeout=timeout))


def one_unit_task(env_id: str) -> dict:
    """The task of an environment of one web server unit (service s1, unit u1)."""
    return contract.task_body({"id": env_id, "name": "x", "services": [{
        "id": "s1", "name": "site", "type": "linuxWebServer", "units": [
            {"id": "u1", "name": "site_instance_0"}]}]}, None, "t1")


class RecordingStacks(SimulatedStacks):
    """The simulated cloud's stacks, every call written down in ``calls``;
    ``gate`` (if any) holds the first apply in the cloud until it is set,
    ``entered`` being set when it is there."""

    def __init__(self, calls: list, gate: threading.Event | None = None,
                 entered: threading.Event | None = None) -> None:
        super().__init__(SimulatedCloud())
        self.calls, self.gate, self.entered = calls, gate, entered

    def apply(self, request):
        self.calls.append(("apply", request.stack_name))
        if self.gate is not None and len(self.calls) == 1:
            self.entered.set()
            self.gate.wait(60)
        return super().apply(request)

    def delete(self, stack_name):
        self.calls.append(("delete", stack_name))
        return super().delete(stack_name)

    def remove(self, stack_name, resources):
        self.calls.append(("remove", stack_name))
        return super().remove(stack_name, resources)


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
