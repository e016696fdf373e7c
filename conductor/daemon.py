"""The conductor daemon: deployment tasks in, reports and results out.

``max_environments`` consumer threads each take one task at a time from the
``tasks`` queue and run it to the end.  A task is acknowledged only after its
result is published: if a conductor dies mid-deployment the broker hands the
task to another one, which runs it again.  Reports carry ids derived from
the task id and their order, so the API stores a report of a rerun once.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from fornace.common import contract
from fornace.common.broker import Broker, Consumer, Delivery
from fornace.common.catalog import Catalog, load_catalog
from fornace.common.resources import BUILTIN_DATA
from fornace.common.secrets import find_secrets, mask_text
from fornace.conductor.dsl.workflows import load_workflows
from fornace.conductor.executors.agents import AmqpAgents
from fornace.conductor.executors.base import StackExecutor
from fornace.conductor.jobs.lifecycle import Job, run_job
from fornace.conductor.jobs.records import JobRecorder
from fornace.conductor.session import Settings
from fornace.conductor.templates import TemplateStore

LOG = logging.getLogger(__name__)

StacksFactory = Callable[[contract.Task], StackExecutor]


@dataclass
class ConductorSettings:
    broker_url: str = "memory://"
    data_dir: Path = Path("data")
    max_environments: int = 4
    engine: Settings | None = None
    database_url: str | None = None   # where the job locks are (None: no lock)
    lock_stale_after: float = 60.0    # seconds without a heartbeat: a dead holder


class Conductor:
    def __init__(self, settings: ConductorSettings, stacks: StacksFactory) -> None:
        self.settings = settings
        self.stacks = stacks
        self.store = TemplateStore(settings.data_dir)
        self.workflows = load_workflows(Path(settings.data_dir) / "workflows")
        types = Path(settings.data_dir) / "types.json"
        if not types.exists():   # a 0.2 data folder: the built-in catalog, as the API does
            types = BUILTIN_DATA / "types.json"
        self.catalog: Catalog | None = load_catalog(types)
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self.locks = None
        if settings.database_url:
            from fornace.conductor.jobs.lock import JobLock

            self.locks = JobLock(settings.database_url)
        self.stop = threading.Event()
        self.consumers: list[Consumer] = []
        self._threads: list[threading.Thread] = []
        self._running: dict[str, threading.Event] = {}
        self._beating: dict[tuple[str, str], threading.Event] = {}
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
        job_id = task.job_id or task_id
        LOG.info("environment %s: job %s (%s) started", task.environment_id, job_id,
                 task.action)
        with Broker(self.settings.broker_url) as broker:
            secrets = find_secrets(task.model)
            if task.token:
                secrets.add(task.token)
            recorder = JobRecorder(
                task.environment_id, job_id,
                # on the results queue: the API stores them before the result (one order)
                lambda body, message_id: broker.publish(contract.RESULTS, body, message_id),
                mask=lambda text: mask_text(text, secrets) if secrets else text)
            if not self._lock(task, job_id, recorder):
                return
            try:
                outcome = self._run(task, task_id, broker, recorder)
                broker.publish(contract.RESULTS, contract.result_body(outcome.model), task_id)
            finally:
                self._unlock(task, job_id)
        LOG.info("environment %s: job %s (%s) ended: %s after %d round(s)",
                 task.environment_id, job_id, task.action, outcome.status, outcome.rounds)

    def _run(self, task: contract.Task, task_id: str, broker: Broker,
             recorder: JobRecorder) -> Any:
        counter = iter(range(1, 1 << 30))

        def report(body: dict) -> None:
            broker.publish(contract.REPORTS, body, f"{task_id}-report-{next(counter)}")

        engine = self.settings.engine or Settings()
        agents = AmqpAgents(broker, task.environment_id, engine.agent_timeout)
        return run_job(Job(task=task, workflows=self.workflows, store=self.store,
                           catalog=self.catalog, stacks=self.stacks(task), agents=agents,
                           recorder=recorder, engine=engine, reporter=report,
                           plan_seed=task_id))

    # -- the job lock shared by conductors through the database -------------------
    def _lock(self, task: contract.Task, job_id: str, recorder: JobRecorder) -> bool:
        """Take the environment's lock; a refused job ends ``refused`` at once."""
        if self.locks is None:
            return True
        try:
            held = self.locks.acquire(task.environment_id, job_id, self.holder,
                                      self.settings.lock_stale_after)
        except Exception as exc:  # noqa: BLE001 -- no database: run, but say so
            LOG.warning("environment %s: job lock unavailable (%s); running job %s "
                        "without it", task.environment_id, exc, job_id)
            return True
        if held is None:
            self._beat(task.environment_id, job_id)
            return True
        reason = (f"environment {task.environment_id} is locked by job {held.job_id} "
                  f"(conductor {held.holder}, since {held.acquired}); job {job_id} refused, "
                  f"nothing was run")
        LOG.warning("%s", reason)
        recorder.job_state("refused", reason)
        return False

    def _beat(self, environment_id: str, job_id: str) -> None:
        stop = threading.Event()
        self._beating[(environment_id, job_id)] = stop

        def beat() -> None:
            while not stop.wait(self.settings.lock_stale_after / 4):
                try:
                    self.locks.heartbeat(environment_id, job_id)
                except Exception as exc:  # noqa: BLE001 -- try again next beat
                    LOG.warning("job %s: lock heartbeat failed: %s", job_id, exc)

        threading.Thread(target=beat, name=f"lock-{job_id}", daemon=True).start()

    def _unlock(self, task: contract.Task, job_id: str) -> None:
        if self.locks is None:
            return
        stop = self._beating.pop((task.environment_id, job_id), None)
        if stop is not None:
            stop.set()
        try:
            self.locks.release(task.environment_id, job_id)
        except Exception as exc:  # noqa: BLE001 -- it goes stale and is taken over
            LOG.warning("job %s: could not release the lock: %s", job_id, exc)
