#!/usr/bin/env python3
"""Deployment benchmark: K environments x U units on the local cloud (not a test).

One in-process :class:`fornace.conductor.daemon.Conductor` (``--parallel`` consumer
threads) deploys K environments of one ``benchNoop`` service with U units
each, with the catalog of ``tools/bench_deploy/``: every unit gets an
instance of :class:`fornace.conductor.executors.localcloud.LocalStacks` (a real ``fornace
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
  ``AmqpAgents`` per task (its ``agents`` backend); the benchmark gives it a
  subclass whose broker is wrapped: the clock starts just before each
  plan's publish and stops when the conductor's inbox hands over its answer.
  No conductor or agent code is changed.
* Agent boot is kept out.  Before a round of plans is published (and the
  clocks started) the wrapper waits until the input queue of every unit of
  the round has a consumer (a queue declare reports the consumer count): a
  first plan would otherwise wait for the agent process to start, which is
  the cloud's boot time, not the price of a command.  That wait is printed
  apart ("agent boot wait"); apart from it the conductor runs unchanged.
* Agent execution time comes from the agent's own journal
  (``<sandbox>/work/journal.jsonl``, read before the stack is deleted): the
  ``result`` record's time minus the ``started`` record's time (wall clock,
  1 ms resolution).  That span holds the ``started`` fsync, reading the plan
  and running the script; the ``result`` fsync, the answer's publish and
  everything on the way is overhead.
* Per-command overhead = conductor round trip - agent execution time, per
  plan, split between each agent's first plan (its answer opens the agent's
  publishing connection) and the later ones.  To show where the time goes
  its legs are printed too (wall clock against the journal): out, publish ->
  ``started``; back, ``result`` -> answer received, itself split at the
  ``sent`` record (written once the agent's publish is confirmed) into the
  agent's send and the broker + conductor delivery.  And the conductor's
  publish phase per round: first plan published -> first answer asked for
  (``AmqpAgents`` subscribes to its results first, then publishes every plan
  of a round, each confirmed; answers that come meanwhile wait in its inbox).
* CPU time (``getrusage``) of this process -- the conductor and the bench --
  and of the agent processes reaped during the run: on a small machine the
  agents, one Python process per unit, compete with everything else.

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
    python tools/bench_deploy.py --environments 8 --units 5 --parallel 4   # 20 agents
                                          # booting at once while other commands are timed

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
import resource
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

import kombu  # noqa: E402

from fornace.common import contract  # noqa: E402
from fornace.common.broker import Broker, kombu_queue  # noqa: E402
from fornace.common.db.engine import upgrade  # noqa: E402
from fornace.common.db.urls import shown  # noqa: E402
from fornace.conductor import daemon  # noqa: E402
from fornace.conductor.daemon import Conductor, ConductorSettings  # noqa: E402
from fornace.conductor.executors.agents import AmqpAgents  # noqa: E402
from fornace.conductor.executors.base import PlanReply, PlanRequest  # noqa: E402
from fornace.conductor.executors.localcloud import LocalStacks  # noqa: E402
from fornace.conductor.session import Settings  # noqa: E402

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


class WarningCounter(logging.Handler):
    """Counts the warnings of the conductor's broker code (reconnects, retries).

    Why: a broker outage during the run (another user's ``rabbitmqctl
    stop_app``, say) makes the figures meaningless; the report says so.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


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
    queue: str                     # the agent's input queue
    sent: float                    # perf_counter just before the plan's publish
    sent_wall: float               # time.time() at the same moment
    boot_wait: float               # s the plan waited for its agent to consume
    answered: float | None = None
    answered_wall: float | None = None


class Stopwatch:
    """Every plan the conductor sends and when its answer came back (thread-safe)."""

    def __init__(self) -> None:
        self.plans: dict[str, PlanTimes] = {}
        self.publish_phases: list[float] = []   # per round: first publish -> first read
        self.publishes: list[float] = []        # each plan's Broker.publish (confirmed)
        self.abort = threading.Event()
        self._lock = threading.Lock()

    def sent(self, plan_id: str, queue: str, boot_wait: float) -> None:
        """Start a plan's clock (a rerun of an answered plan keeps the first figures)."""
        times = PlanTimes(queue, time.perf_counter(), time.time(), boot_wait)
        with self._lock:
            known = self.plans.get(plan_id)
            if known is None or known.answered is None:
                self.plans[plan_id] = times

    def answered(self, plan_id: str | None) -> None:
        now, wall = time.perf_counter(), time.time()
        with self._lock:
            times = self.plans.get(plan_id or "")
            if times is not None and times.answered is None:
                times.answered, times.answered_wall = now, wall

    def round_published(self, seconds: float) -> None:
        with self._lock:
            self.publish_phases.append(seconds)

    def published(self, seconds: float) -> None:
        with self._lock:
            self.publishes.append(seconds)

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

    def wait_for_agents(self, queues: list[str], abort: threading.Event) -> float:
        """Seconds waited until every queue had a consumer (or the boot timeout).

        All of a round's agents are waited for before its first plan goes:
        ``AmqpAgents`` hands answers over only once every plan is published,
        so a wait between two publishes would count against the earlier plans.
        """
        started, waiting = time.perf_counter(), list(dict.fromkeys(queues))
        while waiting and not abort.is_set() and time.perf_counter() - started < BOOT_TIMEOUT:
            waiting = [queue for queue in waiting if not self._consumers(queue)]
            if waiting:
                time.sleep(0.05)
        return time.perf_counter() - started

    def _consumers(self, queue: str) -> int:
        """The queue's consumer count; 0 while the broker cannot be asked.

        The declaration is the one ``Broker.publish`` makes, so it changes
        nothing.  A broken connection (a broker restart) is dropped and made
        again on the next call: the probe must not fail the deployment.
        """
        try:
            return kombu_queue(queue)(self._channel()).queue_declare().consumer_count
        except Exception:  # noqa: BLE001 -- any broker error: not known to be ready
            self._drop_channel()
            return 0

    def _channel(self) -> Any:
        channel = getattr(self._local, "channel", None)
        if channel is None:
            conn = self._local.connection = kombu.Connection(self.url, heartbeat=0)
            with self._lock:
                self._connections.append(conn)
            channel = self._local.channel = conn.channel()
        return channel

    def _drop_channel(self) -> None:
        conn = getattr(self._local, "connection", None)
        self._local.channel = self._local.connection = None
        if conn is not None:
            with self._lock:
                self._connections.remove(conn)
            with contextlib.suppress(Exception):
                conn.release()

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                with contextlib.suppress(Exception):
                    conn.release()
            self._connections.clear()


class _TimedInbox:
    """The conductor's results inbox, noting when each answer is handed over."""

    def __init__(self, inbox: Any, watch: Stopwatch, round_started: float | None) -> None:
        self.inbox = inbox
        self.watch = watch
        self.round_started = round_started

    def __enter__(self) -> "_TimedInbox":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.inbox.close()

    def open(self) -> None:
        self.inbox.open()

    def get(self, timeout: float) -> tuple[Any, str | None] | None:
        if self.watch.abort.is_set():   # ends a deployment at once on Ctrl-C
            raise BenchAborted("the benchmark is stopping")
        if self.round_started is not None:  # the conductor starts reading answers now
            self.watch.round_published(time.perf_counter() - self.round_started)
            self.round_started = None
        received = self.inbox.get(timeout)
        if received is not None:
            self.watch.answered(received[1])
        return received


class _TimedBroker:
    """The conductor's broker as ``AmqpAgents`` uses it, with a stopwatch on plans."""

    def __init__(self, broker: Broker, watch: Stopwatch) -> None:
        self.broker = broker
        self.watch = watch
        self.boot_wait = 0.0    # of the round being sent (set by TimedAgents.run)
        self.round_started: float | None = None   # its first publish (reset per round)

    def publish(self, queue: str, body: dict[str, Any], message_id: str | None = None) -> str:
        self.watch.sent(message_id or "", queue, self.boot_wait)
        started = time.perf_counter()
        if self.round_started is None:
            self.round_started = started
        try:
            return self.broker.publish(queue, body, message_id)
        finally:
            self.watch.published(time.perf_counter() - started)

    def inbox(self, queue: str, prefetch: int = 100, heartbeat: int = 0) -> _TimedInbox:
        return _TimedInbox(self.broker.inbox(queue, prefetch, heartbeat), self.watch,
                           self.round_started)


def timed_agents(watch: Stopwatch, probe: AgentProbe) -> type[AmqpAgents]:
    """An ``AmqpAgents`` that times its plans (it is used unchanged otherwise)."""

    class TimedAgents(AmqpAgents):
        def __init__(self, broker: Broker, environment_id: str, *args: Any,
                     **kwargs: Any) -> None:
            self.timed = _TimedBroker(broker, watch)
            super().__init__(self.timed, environment_id, *args, **kwargs)  # type: ignore[arg-type]

        def run(self, requests: list[PlanRequest]) -> list[PlanReply]:
            queues = [contract.agent_queue(self.environment_id, r.service, r.unit)
                      for r in requests]
            self.timed.boot_wait = probe.wait_for_agents(queues, watch.abort)
            self.timed.round_started = None
            return super().run(requests)

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
def instrumented(names: Names) -> Iterator[None]:
    """Give the conductor the run's queue names, then undo.

    Why: ``tasks``, ``task-results`` and ``task-reports`` are shared by every
    Fornace on this broker; unique names keep earlier leftovers (and other
    users) out of the figures.  The contract module is read at call time.
    """
    saved = (contract.TASKS, contract.RESULTS, contract.REPORTS)
    contract.TASKS, contract.RESULTS, contract.REPORTS = names.tasks, names.results, names.reports
    try:
        yield
    finally:
        contract.TASKS, contract.RESULTS, contract.REPORTS = saved


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
    return {"host": conn.hostname or "127.0.0.1", "port": conn.port or 5672,
            "login": conn.userid or "guest", "password": conn.password or "guest",
            "virtual_host": conn.virtual_host or "/", "ssl": bool(conn.ssl),
            "server_address": "127.0.0.1"}


# ------------------------------------------------------------- agents & journals

@dataclass(frozen=True)
class JournalTimes:
    """When the agent journaled a plan (wall clock, 1 ms resolution)."""

    started: float       # before running it
    result: float        # its answer, before publishing it
    sent: float | None   # after the publish was confirmed


def read_journal(path: Path) -> dict[str, JournalTimes]:
    """Plan id -> its journal times, for the plans started and answered."""
    times: dict[str, dict[str, float]] = {}
    with contextlib.suppress(OSError), open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
                times.setdefault(record["id"], {}).setdefault(record["event"], record["time"])
            except (ValueError, KeyError, TypeError):
                continue
    return {plan_id: JournalTimes(events["started"], events["result"], events.get("sent"))
            for plan_id, events in times.items() if "started" in events and "result" in events}


AGENT_PEAK_RSS_MB: list[float] = []   # each agent's, read just before it is stopped


def peak_rss_mb(pid: int) -> float:
    """The largest VmHWM (MB) of ``pid`` and its descendants (an instance runs
    its user data in a shell, and the agent under it)."""
    peak, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) / 1024)
            todo += [int(c) for c in Path(f"/proc/{current}/task/{current}/children")
                     .read_text().split()]
    return peak


def _self_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def stop_stack(stacks: LocalStacks, stack: str) -> None:
    """Stop every agent of a stack, then delete it (their peak RSS noted first).

    Why: ``LocalStacks.delete`` stops instances one after the other, each
    taking up to the agent's 0.5 s consumer poll; signalling them all first
    makes a teardown cost one agent stop instead of U.
    """
    for info in stacks.instances(stack).values():
        if info.get("running") and info.get("pid"):
            AGENT_PEAK_RSS_MB.append(peak_rss_mb(int(info["pid"])))
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
    broker_warnings: int = 0
    cpu_self: float = 0.0        # s of CPU of this process (conductor and bench)
    cpu_agents: float = 0.0      # s of CPU of the agents (and their scripts) reaped


def cpu_times() -> tuple[float, float]:
    """CPU seconds (user + system) of this process and of its reaped children."""
    own, children = (resource.getrusage(who) for who in
                     (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


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
        self.journal: dict[str, JournalTimes] = {}      # plan id -> agent journal times
        self.cleaned: set[str] = set()
        self.queues_left: list[str] = []                 # task ids (teardown in an outage)
        self.errors: list[str] = []
        self.reports = 0
        self.conductor: Conductor | None = None
        self._lock = threading.Lock()
        # teardowns mostly wait for agents to exit: one worker per conductor thread
        self._cleaner = concurrent.futures.ThreadPoolExecutor(args.parallel, "bench-teardown")
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
        cpu_before, started = cpu_times(), time.perf_counter()
        last = self._deploy_all(started)
        for future in self._cleanups:
            future.result()
        self._stop_reports()
        cpu_after = cpu_times()
        return Outcome(wall=last - started, finished=len(self.finished),
                       succeeded=sum(self.finished.values()), reports=self.reports,
                       errors=list(self.errors), cpu_self=cpu_after[0] - cpu_before[0],
                       cpu_agents=cpu_after[1] - cpu_before[1])

    def _start_conductor(self) -> None:
        engine = Settings(agent_timeout=AGENT_TIMEOUT, broker=agent_broker_settings(self.url))
        settings = ConductorSettings(broker_url=self.url, data_dir=CATALOG,
                                     max_environments=self.args.parallel, engine=engine,
                                     database_url=self.args.db)
        self.conductor = Conductor(settings, lambda task: self.stacks)
        # its agents backend: AmqpAgents with the stopwatch (unchanged otherwise)
        self.conductor.agents = timed_agents(self.watch, self.probe)
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
        journal: dict[str, JournalTimes] = {}
        for path in (self.stacks.state_dir / stack).glob("*/work/journal.jsonl"):
            journal.update(read_journal(path))
        stop_stack(self.stacks, stack)
        try:
            delete_queues(self.url, environment_queues(model))
        except Exception as exc:  # noqa: BLE001 -- broker away: close() tries again
            progress(f"queues of {model['id']} not deleted yet ({type(exc).__name__})")
            with self._lock:
                self.queues_left.append(task_id)
        with self._lock:
            self.journal.update(journal)
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
        cleaned = len(self._cleaned())
        progress(f"{elapsed:7.1f} s  {len(self.finished)}/{self.args.environments} deployed, "
                 f"{len(self.models) - len(self.finished)} queued or deploying, "
                 f"{len(self.finished) - cleaned} tearing down, "
                 f"{self.watch.count_answered()} commands answered")

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
        self._stop_reports()
        self.probe.close()
        queues = [q for task_id, model in self.models.items()
                  if task_id not in self.cleaned or task_id in self.queues_left
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
    first_overheads: list[float] = field(default_factory=list)   # each agent's first plan
    later_overheads: list[float] = field(default_factory=list)
    outbound: list[float] = field(default_factory=list)   # publish -> journal started
    inbound: list[float] = field(default_factory=list)    # journal result -> received
    agent_sends: list[float] = field(default_factory=list)  # journal result -> sent
    deliveries: list[float] = field(default_factory=list)   # journal sent -> received
    boot_waits: list[float] = field(default_factory=list)
    answered: int = 0
    unmatched: int = 0

    def add(self, times: PlanTimes, journal: JournalTimes, first: bool) -> None:
        """One answered plan; wall-clock legs come from the agent's journal."""
        assert times.answered is not None and times.answered_wall is not None
        round_trip = times.answered - times.sent
        overhead = round_trip - (journal.result - journal.started)
        self.round_trips.append(round_trip)
        self.executions.append(journal.result - journal.started)
        self.overheads.append(overhead)
        (self.first_overheads if first else self.later_overheads).append(overhead)
        self.outbound.append(journal.started - times.sent_wall)
        self.inbound.append(times.answered_wall - journal.result)
        if journal.sent is not None:
            self.agent_sends.append(journal.sent - journal.result)
            self.deliveries.append(times.answered_wall - journal.sent)


def plan_figures(watch: Stopwatch, journal: dict[str, JournalTimes]) -> PlanFigures:
    """Per plan: conductor round trip, agent execution (journal), and the rest."""
    figures = PlanFigures()
    first: dict[str, float] = {}
    for times in watch.plans.values():
        first[times.queue] = min(times.sent, first.get(times.queue, math.inf))
    for plan_id, times in watch.plans.items():
        figures.boot_waits.append(times.boot_wait)
        if times.answered is None:
            continue
        figures.answered += 1
        if plan_id not in journal:
            figures.unmatched += 1
            continue
        figures.add(times, journal[plan_id], times.sent == first[times.queue])
    return figures


def ms(values: list[float]) -> str:
    """``median x ms, p90 y ms`` of values in seconds."""
    if not values:
        return "n/a"
    return (f"median {statistics.median(values) * 1000:7.2f} ms, "
            f"p90 {percentile(values, 0.9) * 1000:7.2f} ms")


def run_rows(args: argparse.Namespace, outcome: Outcome,
             figures: PlanFigures) -> list[tuple[str, Any]]:
    """What was deployed, how long it took, and what disturbed it."""
    expected = args.environments * args.units * args.commands
    wall = max(outcome.wall, 1e-9)
    disturbed = " (the broker was disturbed during the run: figures unreliable)"
    return [
        ("broker", masked_url(args.broker)),
        ("job locks", f"{shown(args.db)} (each plan fenced, a confirmation standing "
                      f"{daemon.FENCE_FRESH_FOR:g} s)" if args.db else "none (no database)"),
        ("environments", f"{args.environments} ({outcome.succeeded} succeeded, "
                         f"{outcome.finished} finished)"),
        ("units per environment", args.units),
        ("commands per unit", args.commands),
        ("conductor parallelism", args.parallel),
        ("agent commands", f"{figures.answered} answered of {expected} "
                           f"({figures.unmatched} without journal entry)"),
        ("reports", f"{outcome.reports} ({len(outcome.errors)} errors)"),
        ("broker warnings", f"{outcome.broker_warnings}"
                            f"{disturbed if outcome.broker_warnings else ''}"),
        ("wall time", f"{outcome.wall:.1f} s"),
        ("CPU time", f"{outcome.cpu_self:.1f} s conductor+bench, {outcome.cpu_agents:.1f} s "
                     f"agents ({os.cpu_count()} cores; teardown included)"),
        ("peak RSS", f"this process (conductor+bench) {_self_peak_mb():.0f} MB; one agent "
                     + (f"median {statistics.median(AGENT_PEAK_RSS_MB):.0f} MB, max "
                        f"{max(AGENT_PEAK_RSS_MB):.0f} MB" if AGENT_PEAK_RSS_MB else "n/a")),
        ("deployments/s", f"{args.environments / wall:.3f}"),
        ("agent commands/s", f"{figures.answered / wall:.2f}"),
    ]


def plan_rows(raw: list[float], figures: PlanFigures,
              watch: Stopwatch) -> list[tuple[str, Any]]:
    """The per-command figures next to the raw round trip."""
    return [
        ("raw kombu round trip", f"{ms(raw)}  ({len(raw)} round trips)"),
        ("command round trip", ms(figures.round_trips)),
        ("agent execution", ms(figures.executions)),
        ("per-command overhead", ms(figures.overheads)),
        ("  first plan of an agent", ms(figures.first_overheads)),
        ("  later plans", ms(figures.later_overheads)),
        ("  out: publish->started", ms(figures.outbound)),
        ("  back: result->received", ms(figures.inbound)),
        ("    agent: result->sent", ms(figures.agent_sends)),
        ("    broker+conductor: sent->received", ms(figures.deliveries)),
        ("conductor: one plan's publish", ms(watch.publishes)),
        ("conductor: publish phase/round", ms(watch.publish_phases)),
        ("agent boot wait", ms(figures.boot_waits)),
    ]


def print_report(args: argparse.Namespace, raw: list[float], outcome: Outcome,
                 figures: PlanFigures, watch: Stopwatch) -> bool:
    """Print the figures and verdicts; True when every deployment succeeded."""
    complete = outcome.succeeded == args.environments and not outcome.errors
    overhead = statistics.median(figures.overheads) if figures.overheads else math.inf
    ratio = overhead / statistics.median(raw)
    verdicts = [
        ("overhead / raw", f"{ratio:.3f}x (medians)"),
        (f"target {args.environments}x{args.units} complete", "PASS" if complete else "MISS"),
        (f"target overhead <= {OVERHEAD_TARGET:g}x raw",
         "PASS" if ratio <= OVERHEAD_TARGET else "MISS"),
    ]
    for name, value in run_rows(args, outcome, figures) + plan_rows(raw, figures, watch) + verdicts:
        print(f"{name:<36} {value}")
    for error in outcome.errors[:10]:
        print(f"error report: {error}")
    return complete


# ------------------------------------------------------------------ main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--environments", type=int, default=100, metavar="K",
                        help="environments to deploy (default 100)")
    parser.add_argument("--units", type=int, default=10, metavar="U",
                        help="units (agents) per environment (default 10)")
    parser.add_argument("--commands", type=int, default=1, metavar="C",
                        help="no-op plans per unit, one after the other (default 1)")
    parser.add_argument("--parallel", type=int, default=4, metavar="P",
                        help="environments deployed at a time (conductor max_environments, "
                             "default 4)")
    parser.add_argument("--broker", default=DEFAULT_BROKER, metavar="URL",
                        help=f"RabbitMQ URL (default {masked_url(DEFAULT_BROKER)})")
    parser.add_argument("--round-trips", type=int, default=1000, metavar="N",
                        help="raw kombu round trips to time (default 1000)")
    parser.add_argument("--db", metavar="URL", default=None,
                        help="the job locks' database (sqlite:///FILE or postgresql+psycopg://"
                             "...; migrated first): each job holds its environment's lock and "
                             "fences every stack step and plan, as a production conductor "
                             "does (default: none)")
    parser.add_argument("--fence-fresh-for", type=float, default=None, metavar="S",
                        help="how long a confirmation of a job's grant stands for the next "
                             "cloud steps (default: the conductor's; 0: every plan asks)")
    parser.add_argument("--keep", action="store_true", help="keep the state folder")
    args = parser.parse_args(argv)
    if args.fence_fresh_for is not None:
        daemon.FENCE_FRESH_FOR = args.fence_fresh_for
    if args.db:
        upgrade(args.db)
    for name in ("environments", "units", "commands", "parallel", "round_trips"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if kombu.Connection(args.broker).transport_cls not in ("amqp", "pyamqp"):
        parser.error("--broker must be a RabbitMQ amqp:// URL (agents are other processes)")
    return args


def _interrupt(signum: int, frame: Any) -> None:  # noqa: ARG001
    """SIGTERM cleans up like Ctrl-C."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    warnings = WarningCounter()
    logging.getLogger("fornace.common.broker").addHandler(warnings)
    signal.signal(signal.SIGTERM, _interrupt)
    run_id = uuid.uuid4().hex[:8]
    state_dir = Path(tempfile.mkdtemp(prefix=f"fornace-bench-{run_id}-"))
    bench = Bench(args, run_id, state_dir)
    try:
        with instrumented(bench.names):
            try:
                progress(f"timing {args.round_trips} raw kombu round trips")
                raw = raw_round_trips(args.broker, args.round_trips, f"fornace-bench-{run_id}")
                progress(f"deploying {args.environments} x {args.units} units, "
                         f"{args.commands} command(s) each, state in {state_dir}")
                outcome = bench.run()
                outcome.broker_warnings = warnings.count
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
    complete = print_report(args, raw, outcome, plan_figures(bench.watch, bench.journal),
                            bench.watch)
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
