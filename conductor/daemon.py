"""The conductor daemon: deployment tasks in, reports and results out.

``max_environments`` consumer threads each take one task at a time from the
``tasks`` queue and run it to the end.  A task is acknowledged only after its
result is published: if a conductor dies mid-deployment the broker hands the
task to another one, which runs it again.  Reports carry ids derived from
the task id and their order, so the API stores a report of a rerun once.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from . import contract
from .agents import AmqpAgents
from .broker import Broker, Consumer, Delivery
from .executors import StackExecutor
from .session import Session, Settings
from .templates import TemplateStore
from .workflows import load_workflows

LOG = logging.getLogger(__name__)

StacksFactory = Callable[[contract.Task], StackExecutor]


@dataclass
class ConductorSettings:
    broker_url: str = "memory://"
    data_dir: Path = Path("data")
    max_environments: int = 4
    engine: Settings | None = None


class Conductor:
    def __init__(self, settings: ConductorSettings, stacks: StacksFactory) -> None:
        self.settings = settings
        self.stacks = stacks
        self.store = TemplateStore(settings.data_dir)
        self.workflows = load_workflows(Path(settings.data_dir) / "workflows")
        self.stop = threading.Event()
        self.consumers: list[Consumer] = []
        self._threads: list[threading.Thread] = []
        self._running: dict[str, threading.Event] = {}
        self._running_lock = threading.Lock()

    def start(self) -> None:
        """Start the consumer threads (one deployment each at a time)."""
        for number in range(self.settings.max_environments):
            consumer = Consumer(Broker(self.settings.broker_url),
                                {contract.TASKS: self.handle_task}, self.stop)
            thread = threading.Thread(target=consumer.run, name=f"conductor-{number}",
                                      daemon=True)
            thread.start()
            self.consumers.append(consumer)
            self._threads.append(thread)

    def wait_ready(self, timeout: float = 10.0) -> bool:
        return all(consumer.ready.wait(timeout) for consumer in self.consumers)

    def shutdown(self, timeout: float = 30.0) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout)

    def handle_task(self, body: Any, delivery: Delivery) -> None:
        """Run one deployment task; raises ContractError for a malformed one.

        RabbitMQ hands a task back to the queue as soon as the connection that
        took it breaks, while its handler still runs; another consumer thread
        of this conductor may then get it.  That copy waits for the running
        one to end (and is acked with it) instead of running it twice.
        """
        task = contract.parse_task(body)
        task_id = delivery.message_id or f"task-{task.environment_id}"
        with self._running_lock:
            running = self._running.get(task_id)
            if running is None:
                running = self._running[task_id] = threading.Event()
                mine = True
            else:
                mine = False
        if not mine:
            LOG.info("environment %s: deployment %s is already running here; its "
                     "redelivered copy waits for it", task.environment_id, task_id)
            running.wait()
            return
        try:
            self._deploy(task, task_id)
        finally:
            with self._running_lock:
                del self._running[task_id]
            running.set()

    def _deploy(self, task: contract.Task, task_id: str) -> None:
        LOG.info("environment %s: deployment %s started", task.environment_id, task_id)
        with Broker(self.settings.broker_url) as broker:
            counter = iter(range(1, 1 << 30))

            def report(body: dict) -> None:
                broker.publish(contract.REPORTS, body, f"{task_id}-report-{next(counter)}")

            engine = self.settings.engine or Settings()
            agents = AmqpAgents(broker, task.environment_id, engine.agent_timeout)
            outcome = Session(task.model, self.workflows, self.store, self.stacks(task),
                              agents, engine, reporter=report, plan_seed=task_id).run()
            broker.publish(contract.RESULTS, contract.result_body(outcome.model), task_id)
        LOG.info("environment %s: deployment %s ended: %s after %d round(s)",
                 task.environment_id, task_id, outcome.status, outcome.rounds)
