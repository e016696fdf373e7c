#!/usr/bin/env python3
"""Deployment benchmark: K environments x U units on the local cloud (not a test).

One in-process :class:`conductor.daemon.Conductor` (``--parallel`` consumer
threads) deploys K environments of one ``benchNoop`` service with U units
each, with the catalog of ``tools/bench_deploy/``: every unit gets an
instance of :class:`conductor.localcloud.LocalStacks` (a real ``fornace
agent`` process talking to RabbitMQ), then runs C no-op execution plans
(``Bench/Noop``: one ``noop.sh`` command that only exits), one per round.
Everything goes through the broker as in production: the tasks are
published, the final models come back on the results queue (matched by
message id), reports on the reports queue.

Figures printed: deployments/s and agent commands/s over the wall time (first
task published -> last result received), and the per-command overhead next
to a raw kombu round trip measured first, in the same run, on the same
broker.

How the figures are taken -- and why so:

* Raw round trip (the floor of one agent command: plan out, result back).
  Four kombu connections, as in the real path: a publisher with confirms
  sends a persistent JSON message to a durable queue; a responder thread
  consuming it on another connection answers, through its own confirming
  publisher, on a reply queue; the publisher's side consumes that on a fourth
  connection.  Timed from just before the publish to the reply's arrival;
  ``--round-trips`` of them after 20 untimed warm-ups; median and p90.
* Per-command round trip, conductor side.  The conductor builds an
  ``AmqpAgents`` per task; the benchmark swaps ``conductor.daemon.AmqpAgents``
  for a subclass whose broker is wrapped: the clock starts just before each
  plan's publish and stops when the conductor's inbox hands over its answer.
  No conductor or agent code is changed.
* Agent boot is kept out.  Before starting a plan's clock the wrapper waits
  until the unit's input queue has a consumer (a queue declare reports the
  consumer count): a first plan would otherwise wait for the agent process
  to start, which is the cloud's boot time, not the price of a command.  That
  wait is printed apart ("agent boot wait").
* Agent execution time comes from the agent's own journal
  (``<sandbox>/work/journal.jsonl``, read before the stack is deleted): the
  ``result`` record's time minus the ``started`` record's time (wall clock,
  1 ms resolution).  That span holds the ``started`` fsync, reading the plan
  and running the script; the ``result`` fsync, the answer's publish and
  everything on the way is overhead.
* Per-command overhead = conductor round trip - agent execution time, per
  plan.  Its two legs (publish -> journal ``started``; journal ``result`` ->
  answer received, both on the wall clock) are printed too, to show where
  the time goes.

Only ``--parallel`` environments are deployed at a time and a finished
environment is torn down at once (its agents stopped -- all signalled
together, then :meth:`LocalStacks.delete` -- and its queues deleted), with at
most 2 x ``--parallel`` environments between publish and teardown: 1000
agent processes would not fit in memory together.  Queue names are unique
to the run (the conductor's tasks/results/reports queues are renamed for it),
so leftovers of an earlier run cannot interfere; everything the run created
is deleted at the end, also on Ctrl-C or SIGTERM (``--keep`` keeps the state
folder).

    python tools/bench_deploy.py --environments 4 --units 2
    python tools/bench_deploy.py                      # 100 x 10, C = 1
    python tools/bench_deploy.py --commands 5 --parallel 8

Targets: all 100 x 10 deployments complete with success; overhead per agent
command (median) at most 3 x the raw round trip (median).  Exit code 0 when
every deployment succeeded (a missed speed target only prints MISS), 1
otherwise.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import logging
import math
import os
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import kombu  # noqa: E402

from conductor import contract, daemon  # noqa: E402
from conductor.agents import AmqpAgents  # noqa: E402
from conductor.broker import Broker, kombu_queue  # noqa: E402
from conductor.daemon import Conductor, ConductorSettings  # noqa: E402
from conductor.localcloud import LocalStacks  # noqa: E402
from conductor.session import Settings  # noqa: E402

CATALOG = Path(__file__).resolve().parent / "bench_deploy"
DEFAULT_BROKER = "amqp://guest:guest@127.0.0.1:5672//"
WARMUP_ROUND_TRIPS = 20
AGENT_TIMEOUT = 120.0     # s a plan may go unanswered before its deployment fails
BOOT_TIMEOUT = 60.0       # s to wait for an agent to consume before timing its plan anyway
STALL_TIMEOUT = 300.0     # s without a finished deployment: the run is given up
STOP_WAIT = 10.0          # s for signalled agents to exit before LocalStacks.delete
PROGRESS_EVERY = 5.0      # s between progress lines on stderr
OVERHEAD_TARGET = 3.0     # overhead median / raw round trip median


class BenchAborted(Exception):
    """Raised inside the conductor's agent wait when the benchmark stops."""


def progress(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (NaN for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def masked_url(url: str) -> str:
    return kombu.Connection(url).as_uri()


# ------------------------------------------------------------ raw round trip

def raw_round_trips(url: str, count: int, prefix: str) -> list[float]:
    """Seconds of ``count`` bare kombu publish -> consume -> reply round trips.

    Why: the least one agent command can cost on this broker and machine, the
    yardstick of the per-command overhead.
    """
    ping, pong = f"{prefix}-ping", f"{prefix}-pong"
    stop, ready = threading.Event(), threading.Event()
    responder = threading.Thread(target=_respond, args=(url, ping, pong, stop, ready),
                                 name="bench-responder", daemon=True)
    responder.start()
    try:
        if not ready.wait(10):
            raise RuntimeError("the round-trip responder did not start")
        return _ping(url, ping, pong, count)
    finally:
        stop.set()
        responder.join(5)
        delete_queues(url, [ping, pong])


def _confirming(url: str) -> kombu.Connection:
    """A connection whose publishes wait for the broker's confirm (as ours do)."""
    return kombu.Connection(url, heartbeat=0, transport_options={"confirm_publish": True})


def _send(producer: kombu.Producer, queue: str, body: dict[str, Any]) -> None:
    target = kombu_queue(queue)
    producer.publish(body, exchange=target.exchange, routing_key=queue, declare=[target],
                     serializer="json", delivery_mode=kombu.entity.PERSISTENT_DELIVERY_MODE,
                     message_id=uuid.uuid4().hex)


def _respond(url: str, ping: str, pong: str, stop: threading.Event,
             ready: threading.Event) -> None:
    """The agent's stand-in: answer every message of ``ping`` on ``pong``."""
    with kombu.Connection(url, heartbeat=0) as listen, _confirming(url) as talk:
        producer = kombu.Producer(talk)

        def answer(body: Any, message: Any) -> None:
            _send(producer, pong, body)
            message.ack()

        with listen.Consumer(queues=[kombu_queue(ping)], callbacks=[answer], prefetch_count=1):
            ready.set()
            while not stop.is_set():
                with contextlib.suppress(socket.timeout):
                    listen.drain_events(timeout=0.2)


def _ping(url: str, ping: str, pong: str, count: int) -> list[float]:
    """The conductor's stand-in: send, wait for the answer, time it."""
    times: list[float] = []
    answers: list[Any] = []

    def receive(body: Any, message: Any) -> None:
        message.ack()
        answers.append(body)

    with _confirming(url) as talk, kombu.Connection(url, heartbeat=0) as listen:
        producer = kombu.Producer(talk)
        with listen.Consumer(queues=[kombu_queue(pong)], callbacks=[receive]):
            for number in range(WARMUP_ROUND_TRIPS + count):
                answers.clear()
                started = time.perf_counter()
                _send(producer, ping, {"n": number})
                while not answers:
                    listen.drain_events(timeout=10)
                if number >= WARMUP_ROUND_TRIPS:
                    times.append(time.perf_counter() - started)
    return times


def delete_queues(url: str, names: list[str], exchanges: tuple[str, ...] = ()) -> None:
    """Delete queues (and exchanges) over one connection; absent ones are fine."""
    with kombu.Connection(url, heartbeat=0) as conn:
        channel = conn.channel()
        for name in names:
            kombu.Queue(name, no_declare=True)(channel).delete()
        for name in exchanges:
            kombu.Exchange(name, "direct")(channel).delete()


# ------------------------------------------------- the conductor, instrumented

@dataclass
class PlanTimes:
    environment: str
    sent: float                    # perf_counter just before the plan's publish
    sent_wall: float               # time.time() at the same moment
    boot_wait: float               # s the plan waited for its agent to consume
    answered: float | None = None
    answered_wall: float | None = None


class Stopwatch:
    """Every plan the conductor sends and when its answer came back (thread-safe)."""

    def __init__(self) -> None:
        self.plans: dict[str, PlanTimes] = {}
        self.abort = threading.Event()
        self._lock = threading.Lock()

    def sent(self, plan_id: str, environment: str, boot_wait: float) -> None:
        times = PlanTimes(environment, time.perf_counter(), time.time(), boot_wait)
        with self._lock:
            self.plans[plan_id] = times

    def answered(self, plan_id: str | None) -> None:
        now, wall = time.perf_counter(), time.time()
        with self._lock:
            times = self.plans.get(plan_id or "")
            if times is not None and times.answered is None:
                times.answered, times.answered_wall = now, wall

    def count_answered(self) -> int:
        with self._lock:
            return sum(1 for t in self.plans.values() if t.answered is not None)


class AgentProbe:
    """Tells whether a unit's agent consumes its input queue yet.

    Why: the first plan of a cold instance would wait in its queue for the
    agent process to boot; that is boot time, which the benchmark keeps out
    of the per-command figures and reports apart.  One connection per
    conductor thread, kept for the whole run.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self._local = threading.local()
        self._connections: list[kombu.Connection] = []
        self._lock = threading.Lock()

    def wait_for_agent(self, queue: str, abort: threading.Event) -> float:
        """Seconds waited until ``queue`` had a consumer (or the boot timeout)."""
        started = time.perf_counter()
        while not abort.is_set() and time.perf_counter() - started < BOOT_TIMEOUT:
            if self._consumers(queue):
                break
            time.sleep(0.01)
        return time.perf_counter() - started

    def _consumers(self, queue: str) -> int:
        # the same durable declaration Broker.publish makes: it changes nothing
        return kombu_queue(queue)(self._channel()).queue_declare().consumer_count

    def _channel(self) -> Any:
        channel = getattr(self._local, "channel", None)
        if channel is None:
            conn = kombu.Connection(self.url, heartbeat=0)
            with self._lock:
                self._connections.append(conn)
            channel = self._local.channel = conn.channel()
        return channel

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                with contextlib.suppress(Exception):
                    conn.release()
            self._connections.clear()


class _TimedInbox:
    """The conductor's results inbox, noting when each answer is handed over."""

    def __init__(self, inbox: Any, watch: Stopwatch) -> None:
        self.inbox = inbox
        self.watch = watch

    def __enter__(self) -> "_TimedInbox":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.inbox.close()

    def get(self, timeout: float) -> tuple[Any, str | None] | None:
        if self.watch.abort.is_set():   # ends a deployment at once on Ctrl-C
            raise BenchAborted("the benchmark is stopping")
        received = self.inbox.get(timeout)
        if received is not None:
            self.watch.answered(received[1])
        return received


class _TimedBroker:
    """The conductor's broker as ``AmqpAgents`` uses it, with a stopwatch on plans."""

    def __init__(self, broker: Broker, environment: str, watch: Stopwatch,
                 probe: AgentProbe) -> None:
        self.broker = broker
        self.environment = environment
        self.watch = watch
        self.probe = probe

    def publish(self, queue: str, body: dict[str, Any], message_id: str | None = None) -> str:
        boot_wait = self.probe.wait_for_agent(queue, self.watch.abort)
        self.watch.sent(message_id or "", self.environment, boot_wait)
        return self.broker.publish(queue, body, message_id)

    def inbox(self, queue: str, prefetch: int = 100) -> _TimedInbox:
        return _TimedInbox(self.broker.inbox(queue, prefetch), self.watch)


def timed_agents(watch: Stopwatch, probe: AgentProbe) -> type[AmqpAgents]:
    """An ``AmqpAgents`` that times its plans (it is used unchanged otherwise)."""

    class TimedAgents(AmqpAgents):
        def __init__(self, broker: Broker, environment_id: str, *args: Any,
                     **kwargs: Any) -> None:
            super().__init__(_TimedBroker(broker, environment_id, watch, probe),  # type: ignore[arg-type]
                             environment_id, *args, **kwargs)

    return TimedAgents


@dataclass(frozen=True)
class Names:
    """The run's own names for the conductor's shared queues."""

    tasks: str
    results: str
    reports: str

    @classmethod
    def for_run(cls, run_id: str) -> "Names":
        prefix = f"fornace-bench-{run_id}"
        return cls(f"{prefix}-tasks", f"{prefix}-results", f"{prefix}-reports")


@contextlib.contextmanager
def instrumented(names: Names, agents: type[AmqpAgents]) -> Iterator[None]:
    """Give the conductor the run's queue names and the timing agents, then undo.

    Why: ``tasks``, ``task-results`` and ``task-reports`` are shared by every
    Fornace on this broker; unique names keep earlier leftovers (and other
    users) out of the figures.  The contract module is read at call time.
    """
    saved = (contract.TASKS, contract.RESULTS, contract.REPORTS, daemon.AmqpAgents)
    contract.TASKS, contract.RESULTS, contract.REPORTS = names.tasks, names.results, names.reports
    daemon.AmqpAgents = agents  # type: ignore[misc]
    try:
        yield
    finally:
        contract.TASKS, contract.RESULTS, contract.REPORTS, daemon.AmqpAgents = saved


# ----------------------------------------------------------------- the models

def environment_model(env_id: str, units: int, commands: int) -> dict[str, Any]:
    """An environment as the API sends it, with each unit's list of commands."""
    unit_list = [{"id": f"u{j}", "name": f"noop_{j}",
                  "commands": [{"id": f"u{j}-c{n}", "n": n} for n in range(1, commands + 1)]}
                 for j in range(1, units + 1)]
    return {"id": env_id, "name": f"bench-{env_id}",
            "services": [{"id": "noop", "name": "noop", "type": "benchNoop",
                          "unitNamingPattern": "noop#", "units": unit_list}]}


def environment_queues(model: dict[str, Any]) -> list[str]:
    """The agent input queues and the results queue of an environment."""
    env_id = model["id"]
    return [contract.agent_queue(env_id, service["id"], unit["id"])
            for service in model["services"] for unit in service["units"]] + \
        [contract.results_queue(env_id)]


def model_complete(body: Any, units: int, commands: int) -> bool:
    """Whether a final model has every unit with every command done."""
    try:
        model = contract.parse_result(body)
        found = [unit for service in model["services"] for unit in service["units"]]
    except (contract.ContractError, KeyError, TypeError):
        return False
    return len(found) == units and all(
        not (unit.get("state") or {}).get("failed")
        and len(unit.get("commands") or []) == commands
        and all(command.get("done") for command in unit["commands"])
        for unit in found)


def agent_broker_settings(url: str) -> dict[str, Any]:
    """``Settings.broker`` for the agents: the same RabbitMQ as the conductor."""
    conn = kombu.Connection(url)
    if conn.transport_cls not in ("amqp", "pyamqp", "librabbitmq"):
        raise SystemExit(f"bench_deploy: --broker must be a RabbitMQ amqp:// URL, "
                         f"not {masked_url(url)}")
    return {"host": conn.hostname or "127.0.0.1", "port": conn.port or 5672,
            "login": conn.userid or "guest", "password": conn.password or "guest",
            "virtual_host": conn.virtual_host or "/", "ssl": bool(conn.ssl),
            "server_address": "127.0.0.1"}


# ------------------------------------------------------------- agents & journals

def read_journal(path: Path) -> dict[str, tuple[float, float]]:
    """Plan id -> (``started`` time, ``result`` time) from an agent journal."""
    started: dict[str, float] = {}
    spans: dict[str, tuple[float, float]] = {}
    with contextlib.suppress(OSError), open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") == "started":
                started[record["id"]] = record["time"]
            elif record.get("event") == "result" and record["id"] in started:
                spans[record["id"]] = (started[record["id"]], record["time"])
    return spans


def stop_stack(stacks: LocalStacks, stack: str) -> None:
    """Stop every agent of a stack, then delete it.

    Why: ``LocalStacks.delete`` stops instances one after the other, each
    taking up to the agent's 0.5 s consumer poll; signalling them all first
    makes a teardown cost one agent stop instead of U.
    """
    for info in stacks.instances(stack).values():
        if info.get("running") and info.get("pid"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(info["pid"]), signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT
    while time.monotonic() < deadline and \
            any(i["running"] for i in stacks.instances(stack).values()):
        time.sleep(0.05)
    stacks.delete(stack)


# ------------------------------------------------------------------ the run

@dataclass
class Outcome:
    wall: float = 0.0
    finished: int = 0
    succeeded: int = 0
    reports: int = 0
    errors: list[str] = field(default_factory=list)


class Bench:
    """One run: the conductor, the environments in flight and their teardown."""

    def __init__(self, args: argparse.Namespace, run_id: str, state_dir: Path) -> None:
        self.args = args
        self.url = args.broker
        self.run_id = run_id
        self.names = Names.for_run(run_id)
        self.stacks = LocalStacks(state_dir / "cloud")
        self.watch = Stopwatch()
        self.probe = AgentProbe(self.url)
        self.window = 2 * args.parallel
        self.models: dict[str, dict[str, Any]] = {}    # task id -> model
        self.finished: dict[str, bool] = {}             # task id -> complete
        self.spans: dict[str, tuple[float, float]] = {}  # plan id -> journal span
        self.cleaned: set[str] = set()
        self.errors: list[str] = []
        self.reports = 0
        self.conductor: Conductor | None = None
        self._lock = threading.Lock()
        self._cleaner = concurrent.futures.ThreadPoolExecutor(2, "bench-teardown")
        self._cleanups: list[concurrent.futures.Future] = []
        self._reports_done = threading.Event()
        self._reports_thread: threading.Thread | None = None

    # -- running -------------------------------------------------------------------
    def run(self) -> Outcome:
        """Deploy every environment; the figures of the deployments."""
        self._start_conductor()
        self._reports_thread = threading.Thread(target=self._collect_reports,
                                                name="bench-reports", daemon=True)
        self._reports_thread.start()
        started = time.perf_counter()
        last = self._deploy_all(started)
        for future in self._cleanups:
            future.result()
        self._stop_reports()
        return Outcome(wall=last - started, finished=len(self.finished),
                       succeeded=sum(self.finished.values()), reports=self.reports,
                       errors=list(self.errors))

    def _start_conductor(self) -> None:
        engine = Settings(agent_timeout=AGENT_TIMEOUT, broker=agent_broker_settings(self.url))
        settings = ConductorSettings(broker_url=self.url, data_dir=CATALOG,
                                     max_environments=self.args.parallel, engine=engine)
        self.conductor = Conductor(settings, lambda task: self.stacks)
        self.conductor.start()
        if not self.conductor.wait_ready():
            raise RuntimeError("the conductor did not subscribe to its tasks queue")

    def _deploy_all(self, started: float) -> float:
        """Publish tasks (within the window) and take results; the last result's time."""
        total, last, shown = self.args.environments, started, started
        with Broker(self.url) as broker, broker.inbox(self.names.results) as results:
            while len(self.finished) < total:
                self._publish_more(broker, total)
                received = results.get(timeout=0.2)
                now = time.perf_counter()
                if received is not None and self._take_result(*received):
                    last = now
                self._check_teardowns()
                if now - shown >= PROGRESS_EVERY:
                    shown = now
                    self._show_progress(now - started)
                if now - last > STALL_TIMEOUT:
                    raise RuntimeError(f"no deployment finished for {STALL_TIMEOUT:g} s")
        return last

    def _publish_more(self, broker: Broker, total: int) -> None:
        while len(self.models) < total and \
                len(self.models) - len(self._cleaned()) < self.window:
            env_id = f"{self.run_id}{len(self.models):04d}"
            model = environment_model(env_id, self.args.units, self.args.commands)
            task_id = f"bench-{env_id}"
            self.models[task_id] = model
            broker.publish(self.names.tasks, contract.task_body(model, None, "bench"), task_id)

    def _take_result(self, body: Any, message_id: str | None) -> bool:
        """Record a deployment's result and start its teardown; False for strays."""
        if message_id not in self.models or message_id in self.finished:
            return False
        self.finished[message_id] = model_complete(body, self.args.units, self.args.commands)
        self._cleanups.append(self._cleaner.submit(self._teardown, message_id))
        return True

    def _teardown(self, task_id: str) -> None:
        """Read the agents' journals, stop them, delete the environment's queues."""
        model = self.models[task_id]
        stack = f"e{model['id']}"
        spans: dict[str, tuple[float, float]] = {}
        for journal in (self.stacks.state_dir / stack).glob("*/work/journal.jsonl"):
            spans.update(read_journal(journal))
        stop_stack(self.stacks, stack)
        delete_queues(self.url, environment_queues(model))
        with self._lock:
            self.spans.update(spans)
            self.cleaned.add(task_id)

    def _cleaned(self) -> set[str]:
        with self._lock:
            return set(self.cleaned)

    def _check_teardowns(self) -> None:
        """Surface a failed teardown at once (agents would pile up otherwise)."""
        for future in self._cleanups:
            if future.done() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]

    def _show_progress(self, elapsed: float) -> None:
        live = len(self.models) - len(self._cleaned())
        progress(f"{elapsed:7.1f} s  {len(self.finished)}/{self.args.environments} deployed, "
                 f"{live} environment(s) up, {self.watch.count_answered()} commands answered")

    # -- reports ---------------------------------------------------------------------
    def _collect_reports(self) -> None:
        """Count the reports and keep the error ones (they mark a failed deployment)."""
        with Broker(self.url).inbox(self.names.reports) as inbox:
            while True:
                received = inbox.get(timeout=0.2)
                if received is None:
                    if self._reports_done.is_set():
                        return
                    continue
                body = received[0]
                with self._lock:
                    self.reports += 1
                    if isinstance(body, dict) and body.get("level") == "error":
                        self.errors.append(f"{body.get('environment_id')}: {body.get('text')}")

    def _stop_reports(self) -> None:
        """Take the reports still queued, then stop (results come after their reports)."""
        self._reports_done.set()
        if self._reports_thread is not None:
            self._reports_thread.join(30)

    # -- cleaning up ---------------------------------------------------------------
    def close(self) -> None:
        """Stop the conductor and every agent, delete every queue of the run."""
        self.watch.abort.set()
        if self.conductor is not None:
            self.conductor.stop.set()
        self._cleaner.shutdown(wait=True, cancel_futures=True)
        self._sweep_stacks()
        if self.conductor is not None:
            self.conductor.shutdown(timeout=30)
            self._sweep_stacks()   # a deployment may have started instances meanwhile
        self._reports_done.set()
        self.probe.close()
        queues = [q for task_id, model in self.models.items() if task_id not in self.cleaned
                  for q in environment_queues(model)]
        with contextlib.suppress(Exception):
            delete_queues(self.url, queues + [self.names.tasks, self.names.results,
                                              self.names.reports], (self.names.tasks,))

    def _sweep_stacks(self) -> None:
        root = self.stacks.state_dir
        for stack in sorted(p.name for p in root.glob("*") if p.is_dir()
                            and not p.name.startswith(".")):
            try:
                stop_stack(self.stacks, stack)
            except Exception as exc:  # noqa: BLE001 -- go on with the others
                progress(f"could not delete stack {stack}: {exc}")


# ------------------------------------------------------------------ figures

@dataclass
class PlanFigures:
    round_trips: list[float] = field(default_factory=list)
    executions: list[float] = field(default_factory=list)
    overheads: list[float] = field(default_factory=list)
    outbound: list[float] = field(default_factory=list)
    inbound: list[float] = field(default_factory=list)
    boot_waits: list[float] = field(default_factory=list)
    answered: int = 0
    unmatched: int = 0


def plan_figures(watch: Stopwatch, spans: dict[str, tuple[float, float]]) -> PlanFigures:
    """Per plan: conductor round trip, agent execution (journal), and the rest."""
    figures = PlanFigures()
    for plan_id, times in watch.plans.items():
        figures.boot_waits.append(times.boot_wait)
        if times.answered is None or times.answered_wall is None:
            continue
        figures.answered += 1
        span = spans.get(plan_id)
        if span is None:
            figures.unmatched += 1
            continue
        round_trip, execution = times.answered - times.sent, span[1] - span[0]
        figures.round_trips.append(round_trip)
        figures.executions.append(execution)
        figures.overheads.append(round_trip - execution)
        figures.outbound.append(span[0] - times.sent_wall)
        figures.inbound.append(times.answered_wall - span[1])
    return figures


def ms(values: list[float]) -> str:
    """``median x ms, p90 y ms`` of values in seconds."""
    if not values:
        return "n/a"
    return (f"median {statistics.median(values) * 1000:7.2f} ms, "
            f"p90 {percentile(values, 0.9) * 1000:7.2f} ms")


def print_report(args: argparse.Namespace, raw: list[float], outcome: Outcome,
                 figures: PlanFigures) -> bool:
    """Print the figures; True when every deployment completed with success."""
    expected = args.environments * args.units * args.commands
    complete = outcome.succeeded == args.environments and not outcome.errors
    raw_median = statistics.median(raw)
    overhead = statistics.median(figures.overheads) if figures.overheads else math.inf
    ratio = overhead / raw_median
    wall = max(outcome.wall, 1e-9)
    rows = [
        ("broker", masked_url(args.broker)),
        ("environments", f"{args.environments} ({outcome.succeeded} succeeded, "
                         f"{outcome.finished} finished)"),
        ("units per environment", args.units),
        ("commands per unit", args.commands),
        ("conductor parallelism", args.parallel),
        ("agent commands", f"{figures.answered} answered of {expected} "
                           f"({figures.unmatched} without journal entry)"),
        ("reports", f"{outcome.reports} ({len(outcome.errors)} errors)"),
        ("wall time", f"{outcome.wall:.1f} s"),
        ("deployments/s", f"{args.environments / wall:.3f}"),
        ("agent commands/s", f"{figures.answered / wall:.2f}"),
        ("raw kombu round trip", f"{ms(raw)}  ({len(raw)} round trips)"),
        ("command round trip", ms(figures.round_trips)),
        ("agent execution", ms(figures.executions)),
        ("per-command overhead", ms(figures.overheads)),
        ("  out: publish->started", ms(figures.outbound)),
        ("  back: result->received", ms(figures.inbound)),
        ("agent boot wait", ms(figures.boot_waits)),
        ("overhead / raw", f"{ratio:.2f}x (medians)"),
        (f"target {args.environments}x{args.units} complete", "PASS" if complete else "MISS"),
        (f"target overhead <= {OVERHEAD_TARGET:g}x raw",
         "PASS" if ratio <= OVERHEAD_TARGET else "MISS"),
    ]
    for name, value in rows:
        print(f"{name:<28} {value}")
    for error in outcome.errors[:10]:
        print(f"error report: {error}")
    return complete


# ------------------------------------------------------------------ main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--environments", type=int, default=100, metavar="K")
    parser.add_argument("--units", type=int, default=10, metavar="U")
    parser.add_argument("--commands", type=int, default=1, metavar="C",
                        help="no-op plans per unit, one after the other (default 1)")
    parser.add_argument("--parallel", type=int, default=4,
                        help="environments deployed at a time (conductor max_environments)")
    parser.add_argument("--broker", default=DEFAULT_BROKER, help="RabbitMQ URL")
    parser.add_argument("--round-trips", type=int, default=1000, metavar="N",
                        help="raw kombu round trips to time (default 1000)")
    parser.add_argument("--keep", action="store_true", help="keep the state folder")
    args = parser.parse_args(argv)
    for name in ("environments", "units", "commands", "parallel", "round_trips"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def _interrupt(signum: int, frame: Any) -> None:  # noqa: ARG001
    """SIGTERM cleans up like Ctrl-C."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _interrupt)
    run_id = uuid.uuid4().hex[:8]
    state_dir = Path(tempfile.mkdtemp(prefix=f"fornace-bench-{run_id}-"))
    bench = Bench(args, run_id, state_dir)
    try:
        with instrumented(bench.names, timed_agents(bench.watch, bench.probe)):
            try:
                progress(f"timing {args.round_trips} raw kombu round trips")
                raw = raw_round_trips(args.broker, args.round_trips, f"fornace-bench-{run_id}")
                progress(f"deploying {args.environments} x {args.units} units, "
                         f"{args.commands} command(s) each, state in {state_dir}")
                outcome = bench.run()
            finally:
                progress("cleaning up")
                bench.close()
    except KeyboardInterrupt:
        progress("interrupted")
        return 130
    finally:
        if args.keep:
            progress(f"state kept in {state_dir}")
        else:
            shutil.rmtree(state_dir, ignore_errors=True)
    complete = print_report(args, raw, outcome, plan_figures(bench.watch, bench.spans))
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
