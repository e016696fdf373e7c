"""Stand-ins for the agents of a deployment, for tests of the conductor and the flow."""
from __future__ import annotations

import threading

from fornace.common import contract
from fornace.common.broker import Broker


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
