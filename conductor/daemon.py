"""The conductor daemon: deployment tasks in, reports and results out.

``max_environments`` consumer threads each take one task at a time from the
``tasks`` queue and run it to the end.  A task is acknowledged only after its
result is published: if a conductor dies mid-deployment the broker hands the
task to another one, which runs it again.  Reports carry ids derived from
the task id and their order, so the API stores a report of a rerun once.
"""
from __future__ import annotations

import contextvars
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from fornace.common import contract, requestcontext
from fornace.common.broker import Broker
from fornace.common.consumer import Consumer, Delivery, Requeue
from fornace.common.db.outages import described, retried, transient
from fornace.common.catalog import Catalog, catalog_file, declared_secrets, load_catalog
from fornace.common.db import queues
from fornace.common.db.pool import Pool
from fornace.common.modelview import iter_units
from fornace.common.packages.layers import job_packages
from fornace.common.secrets import find_secrets, mask_text
from fornace.conductor.executors import agents_class
from fornace.conductor.historypurge import HistoryPurge
from fornace.conductor.executors.base import (Fenced, FencedStacks, JobAgents, StackExecutor,
                                              UnreachableStacks)
from fornace.conductor.jobs.fencing import GrantFence
from fornace.conductor.jobs.lifecycle import Job, failed, run_job
from fornace.conductor.jobs.lock import (AlreadyDone, Grant, HeldTask, JobLock, LockHeld,
                                         Revoked)
from fornace.conductor.jobs.lockwait import LockWait
from fornace.conductor.jobs.messages import JobMessages
from fornace.conductor.jobs.records import JobRecorder
from fornace.conductor.jobs.takeover import Takeover, kept
from fornace.conductor.jobs.tracing import TRACE_BYTES, JobTrace
from fornace.conductor.packages.jobdata import (JobData, PackageData, PackageUnavailable,
                                                database_reader)
from fornace.conductor.session import Settings
from fornace.conductor.templates import TemplateStore
from fornace.conductor.workflowfiles import load_workflows

LOG = logging.getLogger(__name__)

StacksFactory = Callable[[contract.Task], StackExecutor]


@dataclass
class ConductorSettings:
    broker_url: str = "memory://"
    broker_queue_type: str = "classic"  # [broker] queue_type
    data_dir: Path = Path("data")
    max_environments: int = 4
    engine: Settings | None = None
    database_url: str | None = None   # where the job locks are (None: no lock)
    database_pool: Pool | None = None  # its engine's pool ([database]; None: the defaults)
    lock_stale_after: float = 60.0    # seconds without a heartbeat: a dead holder
    lock_wait: float = 600.0          # seconds a job waits for a lock another job holds
    agents: str = "amqp"              # the agent backend (executors.AGENTS)
    # deletes a Keystone trust once its environment's deletion succeeded (None:
    # no [keystone_authtoken] service user: a task's trust stays for the operator)
    delete_trust: Callable[[str], None] | None = None
    # every job's trace (which rule fired on which object) goes to the API
    # before its result (contract 1.7), at most trace_bytes of JSON
    trace: bool = True
    trace_bytes: int = TRACE_BYTES
    # the history of jobs ended longer ago is purged ([database] history_days;
    # 0: never), by one conductor at a time, every history_every seconds
    history_days: int = 0
    history_every: float = 3600.0


def _request_context(task: contract.Task) -> requestcontext.RequestContext | None:
    """The context of the API request that started ``task`` (None: a task of
    an older API, or none started it), on the task's project."""
    if task.request_id is None:
        return None
    return requestcontext.new_context(task.request_id, task.global_request_id,
                                      project_id=task.tenant_id)


class Conductor:
    def __init__(self, settings: ConductorSettings, stacks: StacksFactory) -> None:
        self.settings = settings
        self.stacks = stacks
        self.agents = agents_class(settings.agents)
        engine = settings.engine or Settings()
        self.store = TemplateStore(settings.data_dir, limits=engine.limits)
        # a bad workflow file refuses the start (WorkflowError, every file's problems):
        # a conductor running the other files would deploy environments half-way
        self.workflows = load_workflows(Path(settings.data_dir) / "workflows")
        # a 0.2 data folder (no types.json): the built-in catalog, as the API does
        self.catalog: Catalog | None = load_catalog(catalog_file(settings.data_dir))
        # who holds a lock: this process (a pid may come again after a restart)
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.locks = None
        if settings.database_url:
            self.locks = JobLock(settings.database_url, pool=settings.database_pool)
        # the workflow packages tasks name (contract 1.8), read from the database
        self.data = PackageData(JobData(self.workflows, self.store, self.catalog),
                                database_reader(self.locks.engine) if self.locks else None,
                                engine.limits)
        self.stop = threading.Event()
        self.consumers: list[Consumer] = []
        self._threads: list[threading.Thread] = []
        self._running: dict[str, _Run] = {}
        self._running_lock = threading.Lock()
        self._thread_state = threading.local()
        self._publishers: list[Broker] = []          # every consumer thread's, to close
        self._publishers_lock = threading.Lock()
        # the jobs of silent lock holders, found in the database and run here
        self.takeover = Takeover(self.locks, self.holder, settings.lock_stale_after,
                                 self._has_room, self._reserve, self._requeue, self.stop) \
            if self.locks else None
        self.history = HistoryPurge(self.locks.engine, self.holder, settings.history_days,
                                    self.stop, settings.history_every) \
            if self.locks and settings.history_days > 0 else None

    def start(self) -> None:
        """Start the consumer threads (one deployment each at a time)."""
        for number in range(self.settings.max_environments):
            consumer = Consumer(self._broker(),
                                {contract.TASKS: self.handle_task}, self.stop)
            thread = threading.Thread(target=consumer.run, name=f"conductor-{number}",
                                      daemon=True)
            thread.start()
            self.consumers.append(consumer)
            self._threads.append(thread)
        if self.takeover is not None:
            self.takeover.start()
        if self.history is not None:
            self.history.start()

    def wait_ready(self, timeout: float = 10.0) -> bool:
        return all(consumer.ready.wait(timeout) for consumer in self.consumers)

    def shutdown(self, timeout: float = 30.0) -> None:
        self.stop.set()
        if self.takeover is not None:
            self.takeover.join(timeout)
        if self.history is not None:
            self.history.join(timeout)
        for thread in self._threads:
            thread.join(timeout)
        if not any(thread.is_alive() for thread in self._threads):
            self.data.close()
        with self._publishers_lock:
            for broker in self._publishers:
                broker.close()
            self._publishers.clear()

    def _broker(self) -> Broker:
        return Broker(self.settings.broker_url, queue_type=self.settings.broker_queue_type)

    def _publisher(self) -> Broker:
        """This consumer thread's publishing broker: its connection is kept from
        one job to the next (a new one per job cost a connection handshake
        on both sides for every deployment); it reconnects by itself."""
        broker = getattr(self._thread_state, "broker", None)
        if broker is None:
            broker = self._thread_state.broker = self._broker()
            with self._publishers_lock:
                self._publishers.append(broker)
        return broker

    def _close_publisher(self) -> None:
        """Close this thread's publishing broker (a thread that ends)."""
        broker = getattr(self._thread_state, "broker", None)
        if broker is not None:
            with self._publishers_lock:
                if broker in self._publishers:   # not closed by a shutdown already
                    self._publishers.remove(broker)
            self._thread_state.broker = None
            broker.close()

    def handle_task(self, body: Any, delivery: Delivery) -> None:
        """Run one deployment task; raises ContractError for a malformed one.

        RabbitMQ hands a task back to the queue as soon as the connection that
        took it breaks, while its handler still runs; another consumer thread
        of this conductor may then get it.  That copy waits for the running
        one to end: when the first sent its result, the copy is acknowledged
        with nothing run; when it did not (it failed before), the copy runs.
        A task without a message id cannot be told from another: refused.
        """
        task = contract.parse_task(body)
        # the job's log lines name the API request that started it (contract 1.13)
        with requestcontext.bound(_request_context(task)):
            self._handle_task(task, body, delivery)

    def _handle_task(self, task: contract.Task, body: Any, delivery: Delivery) -> None:
        """:meth:`handle_task` once the task is read."""
        if not delivery.message_id:
            LOG.error("environment %s: a task without a message id is refused (a copy of "
                      "it could not be told from another task); nothing was run",
                      task.environment_id)
            return
        task_id = delivery.message_id
        while True:
            with self._running_lock:
                running = self._running.get(task_id)
                if running is None:
                    running = self._running[task_id] = _Run()
                    break
            LOG.info("environment %s: deployment %s is already running here; its "
                     "redelivered copy waits for it", task.environment_id, task_id)
            running.ended.wait()
            if running.answered:
                return
        self._run_task(task, body, task_id, running, shown_queued=delivery.redelivered)

    def _run_task(self, task: contract.Task, body: Any, task_id: str, running: "_Run",
                  shown_queued: bool = True) -> None:
        """Deploy a task registered as ``running`` here; unregister it at the end.
        ``shown_queued``: the job may be shown ``queued`` by an earlier copy."""
        try:
            self._deploy(task, task_id, body, shown_queued)
            running.answered = True   # result sent, refused, or found done before
        finally:
            with self._running_lock:
                del self._running[task_id]
            running.ended.set()

    # -- the jobs of silent lock holders (jobs.takeover) ---------------------------
    def _has_room(self, task_id: str) -> bool:
        with self._running_lock:
            return (task_id not in self._running and not self.stop.is_set()
                    and len(self._running) < self.settings.max_environments)

    def _reserve(self, body: Any, task_id: str) -> Callable[[], None] | None:
        """A slot here for the task of a silent holder: the call that runs it (in
        a thread of the caller's), or None (a copy of it came meanwhile, or it
        is malformed).  It raises when the task is not answered."""
        try:
            task = contract.parse_task(body)
        except contract.ContractError as exc:
            LOG.error("task %s kept with its lock cannot be taken over: %s", task_id,
                      mask_text(str(exc), find_secrets(body)))
            return None
        with self._running_lock:
            if task_id in self._running:   # that copy runs the job
                return None
            running = self._running[task_id] = _Run()

        def run() -> None:
            try:
                with requestcontext.bound(_request_context(task)):
                    self._run_task(task, body, task_id, running)
            finally:
                self._close_publisher()    # the thread ends with the job
        return run

    def _requeue(self, body: Any, task_id: str) -> None:
        """The task back to the queue, as the broker requeues an unanswered one."""
        with self._broker() as broker:
            broker.publish(contract.TASKS, body, task_id)

    def _deploy(self, task: contract.Task, task_id: str, body: Any = None,
                shown_queued: bool = True) -> None:
        """Run the task's job; it is answered when this returns (its result sent,
        refused, found done before, or its lock lost); it raises otherwise.
        The lock row keeps ``body``, for another conductor to take the job over
        should this one fall silent.

        The API shows a job ``running`` from its creation: it is told so again
        only when the job may be shown ``queued`` -- it waited for the lock
        here, or ``shown_queued``: an earlier copy may have waited (a task the
        broker delivers again, a job taken over).  A deployment thus costs one
        confirmed publish and one stored event less."""
        job_id = task.job_id or task_id
        LOG.info("environment %s: job %s (%s) started", task.environment_id, job_id,
                 task.action)
        broker = self._publisher()   # kept for this thread's next jobs
        data, problem = self._job_data(task)
        # the fields its catalog declares secret (writeOnly) are masked as passwords are
        keys = declared_secrets(data.catalog)
        secrets = find_secrets(task.model, keys=keys)
        find_secrets(task.parameters or {}, secrets, keys)   # an action's own passwords too
        if task.token:
            secrets.add(task.token)
        # every message of the job leaves through it: in order, a confirm per batch
        messages = JobMessages(broker.publish_many, task.environment_id, job_id, task_id,
                               secrets)
        try:
            self._deploy_locked(_JobRun(task, task_id, job_id, body, shown_queued, broker,
                                        data, problem, messages))
        finally:
            messages.close()

    def _deploy_locked(self, run: "_JobRun") -> None:
        """:meth:`_deploy` from the job's lock on."""
        task, job_id, messages = run.task, run.job_id, run.messages
        turn = LockWait(task.environment_id, job_id, self.settings.lock_wait)
        asked = time.monotonic()   # the grant confirms the lock as of (at least) then
        grant = self._lock(task, job_id, messages.recorder,
                           kept(run.body, run.task_id) if run.body is not None else None,
                           turn)
        if grant is None:
            return
        watch = _LockWatch(self.stop)
        cloud_fence = None   # before each step that changes the cloud: still the holder?
        if grant is not _NO_LOCK:
            messages.fence = grant.token
            cloud_fence = GrantFence(self.locks, grant, watch.lost, fresh_for=FENCE_FRESH_FOR,
                                     confirmed=asked)
            if turn.queued or run.shown_queued:   # shown queued (here, or by an earlier copy)
                messages.recorder.job_state("running")
            self._beat(grant, watch)
        trace = JobTrace(run.secrets, self.settings.trace_bytes) if self.settings.trace \
            else None
        try:
            try:
                outcome = self._run(run, watch.reason, trace, cloud_fence)
            except Fenced:   # a step found the lock lost: as the heartbeat would have
                watch.lost.set()
            if watch.stop_seen and not watch.lost.is_set():
                # halted by the shutdown: not answered; another conductor runs it
                LOG.warning("environment %s: job %s stopped with the conductor; its task "
                            "goes back to the queue", task.environment_id, job_id)
                raise Interrupted(f"job {job_id} stopped with the conductor")
            if watch.lost.is_set():
                text = f"job {job_id} ({task.action}) stopped: {LOST}; it sends no result"
                LOG.warning("environment %s: %s", task.environment_id, text)
                messages.report(contract.report_body(task.environment_id, "environment",
                                                     messages.mask(text), "warning",
                                                     environment_id=task.environment_id))
                return
            if task.deleted and _removed_everything(outcome):
                self._delete_queues(run.broker, task.environment_id)
                self._delete_trust(task)
            if trace is not None:
                messages.trace(trace, task.action)
            # after every report and event of the job is confirmed
            messages.result(outcome.model)
            watch.answered = True
        finally:
            messages.flush()   # under the lock: its token still the current one
            self._unlock(grant, watch)
        ended = outcome.status
        if ended == "success" and messages.error_reports:   # as the API will show it
            ended = f"completed_w_errors ({messages.error_reports} error report(s))"
        LOG.info("environment %s: job %s (%s) ended: %s after %d round(s)",
                 task.environment_id, job_id, task.action, ended, outcome.rounds)

    def _job_data(self, task: contract.Task) -> tuple[JobData, PackageUnavailable | None]:
        """What the task runs with, and why it cannot have its packages (None: it
        can; the job then ends with that error, on the conductor's own data)."""
        try:
            return self.data.for_task(task.packages), None
        except PackageUnavailable as exc:   # the job's error, not retried
            return self.data.base, exc

    def _run(self, run: "_JobRun", halted: Callable[[], str | None] | None,
             trace: JobTrace | None = None, fence: GrantFence | None = None) -> Any:
        task, broker, data = run.task, run.broker, run.data
        engine = self.settings.engine or Settings()
        environment_id = task.environment_id
        if self.agents.unit_queues:   # plans sent or not: its agent made it as it started
            self._record_queues(environment_id, [
                contract.agent_queue(environment_id, str(service["id"]), str(unit["id"]))
                for service, unit in iter_units(task.model)])
        agents = self.agents.for_job(JobAgents(
            broker, environment_id, engine.agent_timeout, absent_after=engine.agent_absent_after,
            boot_timeout=engine.agent_boot_timeout, halted=halted,
            on_queues=lambda names: self._record_queues(environment_id, names), fence=fence,
            # dropped by the broker about when a frozen holder's lock goes stale
            results_heartbeat=(max(2, int(self.settings.lock_stale_after / 2))
                               if fence is not None else 0)))
        stacks = self._stacks_of(task)
        job = Job(task=task, workflows=data.workflows, store=data.store, catalog=data.catalog,
                  stacks=FencedStacks(stacks, fence) if fence else stacks, agents=agents,
                  recorder=run.messages.recorder, engine=engine,
                  reporter=run.messages.report, plan_seed=run.task_id,
                  halted=halted, trace=trace, sources=data.sources())
        if trace is not None:
            trace.packages = job_packages(task.packages)
        if run.problem is not None:
            LOG.warning("environment %s: %s", environment_id, run.problem)
            return failed(job, run.problem)
        return run_job(job)

    def _stacks_of(self, task: contract.Task) -> StackExecutor:
        """The task's stack backend; one that fails every action with why when the
        task cannot have it (ValueError: a refused trust or token, no endpoint, a
        bad option).  Anything else is a fault of this conductor: the task goes
        back to the queue for another one."""
        try:
            return self.stacks(task)
        except ValueError as exc:   # answered as the job's error, not retried
            why = str(exc).strip() or type(exc).__name__
            LOG.warning("environment %s: no stack backend: %s", task.environment_id, why)
            return UnreachableStacks(f"the cloud is unreachable: {why}")

    # -- the environment's queues, written down to be deleted with it -------------
    def _record_queues(self, environment_id: str, names: list[str]) -> None:
        if self.locks is None or not names:
            return
        def record() -> None:
            with self.locks.engine.begin() as connection:
                queues.record(connection, environment_id, names)
        try:   # a short outage must not leave queues nobody deletes with the environment
            retried(record, f"environment {environment_id}: writing down its queues")
        except Exception as exc:  # noqa: BLE001 -- the job goes on; `fornace gc` can't see them
            LOG.warning("environment %s: could not write down its queues %s: %s",
                        environment_id, ", ".join(names), exc)

    def _delete_queues(self, broker: Broker, environment_id: str) -> None:
        """After the environment's stack is gone: its agents' queues and its results queue."""
        if self.locks is None:
            return
        with self.locks.engine.connect() as connection:
            names = queues.of_environment(connection, environment_id)
        deleted = []
        for name in names:
            try:
                broker.delete(name)
                deleted.append(name)
            except Exception as exc:  # noqa: BLE001 -- kept on record for `fornace gc`
                LOG.warning("environment %s: could not delete queue %s: %s",
                            environment_id, name, exc)
        with self.locks.engine.begin() as connection:
            queues.forget(connection, deleted)
        if deleted:
            LOG.info("environment %s: deleted its %d queue(s)", environment_id, len(deleted))

    def _delete_trust(self, task: contract.Task) -> None:
        """After the environment's stack is gone: the trust its jobs acted with."""
        if not task.trust_id:
            return
        if self.settings.delete_trust is None:
            LOG.warning("environment %s: deleted, but its Keystone trust stays: this "
                        "conductor has no [keystone_authtoken] service user", task.environment_id)
            return
        try:
            self.settings.delete_trust(task.trust_id)
        except Exception as exc:  # noqa: BLE001 -- the deletion itself succeeded
            LOG.warning("environment %s: deleted, but its Keystone trust could not be "
                        "deleted: %s", task.environment_id, exc)
        else:
            LOG.info("environment %s: deleted its Keystone trust", task.environment_id)

    # -- the job lock shared by conductors through the database -------------------
    def _lock(self, task: contract.Task, job_id: str, recorder: JobRecorder,
              held: HeldTask | None, turn: LockWait) -> Any:
        """The environment's lock for the job: a Grant (or _NO_LOCK without a
        database); None when the job must not run -- refused because another
        job held the lock past ``lock_wait`` (it waits until then, shown
        ``queued``: :mod:`fornace.conductor.jobs.lockwait`), or ended before
        (also while it waited: abandoned).  A copy of a job another conductor
        still runs waits here, unacknowledged, until that one ends or goes
        stale.  A stopping conductor leaves any wait at once (Interrupted)."""
        if self.locks is None:
            return _NO_LOCK
        waiting = False
        while True:
            try:   # a short outage (a failover) is waited out rather than run through
                found = retried(lambda: self.locks.acquire(
                    task.environment_id, job_id, self.holder, self.settings.lock_stale_after,
                    held),
                    f"job {job_id}: taking the lock")
            except Exception as exc:  # noqa: BLE001 -- see below
                if transient(exc):
                    # a longer outage: running unlocked could let a second conductor
                    # run the job too; the task goes back to the queue and comes again
                    LOG.warning("environment %s: job %s: the job lock is out of reach "
                                "(%s); its task goes back to the queue, nothing was run",
                                task.environment_id, job_id, described(exc))
                    raise LockUnreachable(f"job {job_id}: the job lock is out of reach")
                LOG.error("environment %s: job lock unusable (%s); running job %s "
                          "without it", task.environment_id, described(exc), job_id)
                return _NO_LOCK
            if isinstance(found, Grant):
                LOG.info("environment %s: job %s holds the lock (token %d)%s",
                         task.environment_id, job_id, found.token,
                         f" after waiting {turn.waited():.1f} s" if turn.queued else "")
                return found
            if isinstance(found, AlreadyDone):
                LOG.info("environment %s: job %s %s acknowledged without running",
                         task.environment_id, job_id,
                         "ended while it waited for the lock (abandoned): its task is"
                         if turn.queued else "already ended; its task came again and is")
                return None
            if isinstance(found, LockHeld) and found.job_id != job_id:
                said = turn.held(found)
                if said is not None:
                    state, reason = said
                    LOG.log(logging.WARNING if state == "refused" else logging.INFO,
                            "%s", reason)
                    recorder.job_state(state, reason)
                    if state == "refused":
                        return None
            elif not waiting:   # revoked a moment ago, or this job runs at another conductor
                LOG.info("environment %s: job %s waits for %s", task.environment_id, job_id,
                         "the revoked job to stop" if isinstance(found, Revoked) else
                         f"its run at conductor {found.holder} to end or go stale")
                waiting = True
            if self.stop.wait(min(1.0, self.settings.lock_stale_after / 10)):
                raise Interrupted("conductor stopping")  # unacknowledged: redelivered

    def _beat(self, grant: Grant, watch: "_LockWatch") -> None:
        def beat() -> None:
            # often enough that a revoked job stops within the lock's revoke grace
            while not watch.done.wait(min(self.settings.lock_stale_after / 4, 2.0)):
                try:
                    held = self.locks.heartbeat(grant)
                except Exception as exc:  # noqa: BLE001 -- try again next beat
                    LOG.warning("job %s: lock heartbeat failed: %s", grant.job_id, exc)
                    continue
                if not held:
                    watch.lost.set()
                    LOG.warning("environment %s: job %s %s; it stops at its next step",
                                grant.environment_id, grant.job_id, LOST)
                    return

        # its lines are the job's: they name its request too
        threading.Thread(target=contextvars.copy_context().run, args=(beat,),
                         name=f"lock-{grant.job_id}", daemon=True).start()

    def _unlock(self, grant: Any, watch: "_LockWatch") -> None:
        watch.done.set()
        if grant is _NO_LOCK or watch.lost.is_set():
            return
        try:   # a job that sent no result is not done: its next copy must run it
            # a short database outage must not keep the lock held by an ended job
            # (the API would accept jobs that the conductor then refuses)
            retried(lambda: self.locks.release(grant, done=watch.answered),
                    f"job {grant.job_id}: releasing the lock")
            LOG.info("environment %s: job %s released the lock (token %d)",
                     grant.environment_id, grant.job_id, grant.token)
        except Exception as exc:  # noqa: BLE001 -- it goes stale and is taken over
            LOG.warning("job %s: could not release the lock: %s", grant.job_id, exc)


def _removed_everything(outcome: Any) -> bool:
    """A deletion that ended without an error report: its stack is gone."""
    return outcome.status == "success" and not any(
        report.get("level") == "error" for report in outcome.reports)


_NO_LOCK = object()   # no lock table: the job runs alone as far as we know
#: seconds a confirmation of the job's grant stands for the next cloud steps
#: (a burst of plans asks the database a few times, not once each)
FENCE_FRESH_FOR = 0.25
LOST = "it lost the environment's lock (abandoned, or taken over by another conductor)"


class Interrupted(Requeue):
    """The conductor stopped in the middle of a job: its task is requeued."""


class LockUnreachable(Requeue):
    """The database of the job locks stayed out of reach past the retries:
    the task is requeued, not run without its lock."""


@dataclass
class _JobRun:
    """One task's job as run here: what it is and runs with, what it sends."""
    task: contract.Task
    task_id: str
    job_id: str
    body: Any                 # the task as it came (kept with the lock for a takeover)
    shown_queued: bool        # an earlier copy may have shown the job queued
    broker: Broker
    data: JobData
    problem: PackageUnavailable | None   # why it cannot have its packages
    messages: JobMessages

    @property
    def secrets(self) -> set[str]:
        return self.messages.secrets


class _Run:
    """A task running in this conductor, for redelivered copies to wait on."""

    def __init__(self) -> None:
        self.ended = threading.Event()
        self.answered = False


class _LockWatch:
    """Why one job must stop: its grant is gone (``lost``, set by the heartbeat),
    or the conductor stops (``stopping``)."""

    def __init__(self, stopping: threading.Event) -> None:
        self.stopping = stopping
        self.done = threading.Event()   # the job ended: the heartbeat stops
        self.lost = threading.Event()
        self.answered = False           # its result was sent
        self.stop_seen = False

    def reason(self) -> str | None:
        if self.lost.is_set():
            return LOST
        if self.stopping.is_set():
            self.stop_seen = True   # the job acted on it: it did not run to its end
            return "the conductor is stopping (the task goes back to the queue)"
        return None
