#!/usr/bin/env python3
"""Start-up time of the ``fornace`` command, and how soon its daemons' parts
react (not a test).

Start-up: wall seconds of ``fornace --help`` and of a few commands that only
parse their options, best and median of N runs, and the project modules each
loads.  Then ``fornace env list --url URL`` whole process against a running
API (``fornace api`` on SQLite, started here, one environment in it): best
and median wall seconds, median CPU seconds, beside its target, and what it
loads; ``--baseline FORNACE`` (another checkout's ``fornace``, e.g. a worktree
of main) runs interleaved with it, against the same API.  The commands run
with their bytecode caches written (as an installed package has them;
PYTHONDONTWRITEBYTECODE is not passed on).  Reactions (``--reactions``): seconds from an event to what it must
cause, on the in-memory and folder brokers and on RabbitMQ when it answers
on 127.0.0.1 (``FORNACE_AMQP_URL``); the tests assert that these happen,
this prints how soon:

* a drain given a count returns once it has them (its timeout is an hour);
* an inbox waiting in ``get`` returns a message published meanwhile;
* an idle consumer (the default poll interval) ends after its stop;
* a conductor whose job waits on a silent agent ends the job after its stop;
* a plan's agent that dies after taking it is reported gone
  (``absent_after`` 1 s, ``poll`` 0.1 s, as the tests configure it).

    python tools/bench_startup.py            # 10 runs each
    python tools/bench_startup.py --repeat 30
    python tools/bench_startup.py --baseline ../wt-main/.venv/bin/fornace
    python tools/bench_startup.py --reactions --repeat 5

Targets: ``fornace --help`` under 0.3 s; ``fornace agent`` loads nothing of
the API or the conductor; ``fornace env list`` at most 0.12 s whole process
against a running API, loading neither oslo.config nor keystoneauth1.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))   # the tools beside this one
from ports import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = (["--help"], ["--version"], ["agent", "--help"], ["workflow", "--help"],
            ["env", "--help"], ["api", "--help"])
HEAVY = ("fastapi", "sqlalchemy", "lxml", "jsonpath_ng", "kombu", "uvicorn", "oslo_config",
         "keystoneauth1")
ENV_LIST_TARGET = 0.12      # s, whole process (issue 30)
API_START_TIMEOUT = 90.0    # s for the API to answer


def fornace(script: str | None = None) -> list[str]:
    script = script or str(Path(sys.executable).with_name("fornace"))
    return [script] if Path(script).exists() else [sys.executable, "-m", "fornace.cli"]


def child_environment() -> dict[str, str]:
    """The commands' environment: bytecode caches written and read, as an installed
    package has them; no credentials or API of the caller's."""
    return {key: value for key, value in os.environ.items()
            if key != "PYTHONDONTWRITEBYTECODE" and not key.startswith(("OS_", "FORNACE_"))}


def timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``command``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                   env=child_environment())
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def seconds(args: list[str]) -> float:
    return timed(fornace() + args)[0]


def packages_loaded(args: list[str], script: str | None = None) -> str:
    """The fornace packages and heavy libraries the command imports, and how many
    modules in all."""
    python = Path(script).with_name("python") if script else Path(sys.executable)
    code = ("import sys, runpy\nsys.argv = ['fornace', *%r]\n"
            "try:\n    runpy.run_module('fornace.cli', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "names = {m.split('.')[1] for m in sys.modules if m.startswith('fornace.')}\n"
            "heavy = [m for m in %r if m in sys.modules]\n"
            "print(','.join(sorted(names)) + ' | ' + ','.join(heavy) + "
            "' | %%d modules' %% len(sys.modules), file=sys.stderr)") % (args, HEAVY)
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                         env=child_environment())
    return out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "?"


# -- fornace env list against a running API ------------------------------------------------

@contextlib.contextmanager
def running_api(folder: Path) -> Iterator[str]:
    """``fornace api`` on SQLite in ``folder``, holding one environment; its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(folder / "api.log", "wb")
    process = subprocess.Popen(fornace() + ["api", "--port", str(port), "--db",
                                            f"sqlite:///{folder / 'api.sqlite'}"],
                               stdout=log, stderr=subprocess.STDOUT, env=child_environment())
    try:
        deadline = time.monotonic() + API_START_TIMEOUT
        while True:
            try:
                request = urllib.request.Request(
                    f"{url}/environments", data=json.dumps({"name": "bench"}).encode(),
                    headers={"Content-Type": "application/json"}, method="POST")
                urllib.request.urlopen(request, timeout=5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"fornace api did not start: see {folder / 'api.log'}")
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(20)
        log.close()


def env_list(repeat: int, baseline: str | None) -> None:
    """``fornace env list --url URL``, this checkout's and the baseline's interleaved."""
    scripts = {"this checkout": None, **({"baseline": baseline} if baseline else {})}
    with tempfile.TemporaryDirectory() as folder:
        with running_api(Path(folder)) as url:
            args = ["env", "list", "--url", url]
            for script in scripts.values():
                timed(fornace(script) + args)          # bytecode caches written
            runs: dict[str, list[tuple[float, float]]] = {label: [] for label in scripts}
            for _ in range(repeat):
                for label, script in scripts.items():
                    runs[label].append(timed(fornace(script) + args))
            print(f"\nfornace env list --url URL, against fornace api on SQLite "
                  f"(target: at most {ENV_LIST_TARGET:.2f} s whole process)")
            print(f"{'':<16}{'best s':>8}{'median s':>10}{'CPU s':>8}  target  "
                  f"fornace packages | heavy libraries | modules")
            for label, script in scripts.items():
                walls = sorted(wall for wall, _ in runs[label])
                cpu = statistics.median(cpu for _, cpu in runs[label])
                met = "met" if walls[0] <= ENV_LIST_TARGET else "missed"
                print(f"{label:<16}{walls[0]:>8.3f}{statistics.median(walls):>10.3f}"
                      f"{cpu:>8.3f}  {met:<6}  {packages_loaded(args, script)}", flush=True)


# -- reactions ------------------------------------------------------------------------------

def broker_urls(folder: Path) -> dict[str, str]:
    """The transports to measure: memory, a folder, and RabbitMQ when it answers."""
    urls = {"memory": "memory://", "folder": f"filesystem://{folder / 'broker'}"}
    amqp = os.environ.get("FORNACE_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=1).close()
        urls["rabbitmq"] = amqp
    except OSError:
        pass
    return urls


def drain_at_count(url: str) -> float:
    from fornace.common.broker import Broker
    queue = "bench-drain-" + uuid.uuid4().hex[:8]
    with Broker(url) as broker:
        for n in range(3):
            broker.publish(queue, {"n": n})
        started = time.perf_counter()
        broker.drain(queue, timeout=3600, count=2)
        took = time.perf_counter() - started
        broker.delete(queue)
    return took


def inbox_push(url: str) -> float:
    from fornace.common.broker import Broker
    queue = "bench-inbox-" + uuid.uuid4().hex[:8]
    sent: list[float] = []
    with Broker(url) as publisher, Broker(url).inbox(queue) as inbox:
        inbox.open()
        waiting = threading.Event()

        def publish() -> None:
            waiting.wait()
            time.sleep(0.2)                    # get is waiting by now
            sent.append(time.perf_counter())
            publisher.publish(queue, {"n": 1})
        threading.Thread(target=publish, daemon=True).start()
        waiting.set()
        inbox.get(timeout=3600)
        took = time.perf_counter() - sent[0]
        publisher.delete(queue)
    return took


def consumer_stop(url: str) -> float:
    from fornace.common.broker import Broker
    from fornace.common.consumer import Consumer
    stop = threading.Event()
    consumer = Consumer(Broker(url), {"bench-idle-" + uuid.uuid4().hex[:8]: lambda b, d: None},
                        stop)
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    consumer.ready.wait(60)
    time.sleep(0.3)                            # idle, inside its wait for deliveries
    started = time.perf_counter()
    stop.set()
    thread.join(60)
    return time.perf_counter() - started


def conductor_stop(url: str) -> float:
    """A job waiting an hour for a silent agent: from the conductor's stop to its end."""
    from fornace.common import contract
    from fornace.common.broker import Broker
    from fornace.common.consumer import Delivery
    from fornace.conductor.daemon import Conductor, ConductorSettings, Interrupted
    from fornace.conductor.executors.simulator import SimulatedCloud
    from fornace.conductor.session import Settings
    env_id = "b" + uuid.uuid4().hex[:8]
    daemon = Conductor(ConductorSettings(broker_url=url, data_dir=ROOT / "data",
                                         engine=Settings(agent_timeout=3600)),
                       lambda task: SimulatedCloud().executors()[0])
    task = contract.task_body({"id": env_id, "name": "x", "services": [{
        "id": "s1", "name": "site", "type": "linuxWebServer", "units": [
            {"id": "u1", "name": "site_instance_0"}]}]}, None, "t1")

    def handle() -> None:
        try:
            daemon.handle_task(task, Delivery(message_id="t-" + env_id, queue=contract.TASKS))
        except Interrupted:
            pass
    thread = threading.Thread(target=handle, daemon=True)
    thread.start()
    with Broker(url) as broker:                # the plan reached the silent agent's queue
        while not broker.drain(contract.agent_queue(env_id, "s1", "u1"), timeout=0.2):
            pass
        started = time.perf_counter()
        daemon.stop.set()
        thread.join(60)
        took = time.perf_counter() - started
        for queue in (contract.RESULTS, contract.REPORTS, contract.agent_queue(env_id, "s1", "u1")):
            broker.drain(queue, timeout=0.1)
    daemon.shutdown()
    return took


def agent_gone(url: str) -> float:
    """An agent takes its plan and dies: from its death to the plan's AgentGone."""
    from fornace.common import contract
    from fornace.common.broker import Broker
    from fornace.conductor.executors.agents import AmqpAgents
    from fornace.conductor.executors.base import PlanRequest
    env_id = "b" + uuid.uuid4().hex[:8]
    queue = contract.agent_queue(env_id, "s1", "u1")
    died: list[float] = []

    def agent() -> None:
        with Broker(url) as broker, broker.inbox(queue) as inbox:
            inbox.open()
            while inbox.get(timeout=0.2) is None:
                pass
        died.append(time.perf_counter())      # the inbox closed: it listens no more
    threading.Thread(target=agent, daemon=True).start()
    with Broker(url) as broker:
        agents = AmqpAgents(broker, env_id, default_timeout=120, poll=0.1, absent_after=1.0)
        while not broker.consumers([queue])[queue]:
            time.sleep(0.02)
        agents.run([PlanRequest(service="s1", unit="u1", template="T",
                                plan={"ID": "plan-u1", "Commands": []})])
        took = time.perf_counter() - died[0]
        broker.delete(queue)
    return took


REACTIONS: list[tuple[str, Callable[[str], float], tuple[str, ...]]] = [
    ("drain returns at its count", drain_at_count, ("memory", "folder", "rabbitmq")),
    ("inbox gets a pushed message", inbox_push, ("memory", "folder", "rabbitmq")),
    ("idle consumer stops", consumer_stop, ("memory", "folder", "rabbitmq")),
    ("conductor stops a waiting job", conductor_stop, ("memory",)),
    ("a dead agent is reported gone", agent_gone, ("folder", "rabbitmq")),
]


def reactions(repeat: int) -> None:
    logging.getLogger("fornace").setLevel(logging.ERROR)   # the stopped jobs' warnings
    with tempfile.TemporaryDirectory() as folder:
        urls = broker_urls(Path(folder))
        print(f"\n{'reaction':<34}{'broker':<10}{'best s':>8}{'median s':>10}")
        for label, measure, transports in REACTIONS:
            for transport in transports:
                if transport in urls:
                    runs = sorted(measure(urls[transport]) for _ in range(repeat))
                    print(f"{label:<34}{transport:<10}{runs[0]:>8.3f}"
                          f"{statistics.median(runs):>10.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--baseline", metavar="FORNACE",
                        help="another checkout's fornace script, run interleaved with this "
                             "one's for fornace env list (e.g. a worktree of main)")
    parser.add_argument("--reactions", action="store_true",
                        help="also how soon the daemons' parts react (brokers, conductor)")
    args = parser.parse_args()
    print(f"{'command':<24}{'best s':>8}{'median s':>10}  fornace packages | heavy libraries"
          f" | modules")
    for command in COMMANDS:
        timed(fornace() + command)                      # bytecode caches written
        runs = sorted(seconds(command) for _ in range(args.repeat))
        print(f"{'fornace ' + ' '.join(command):<24}{runs[0]:>8.3f}{statistics.median(runs):>10.3f}"
              f"  {packages_loaded(command)}")
    env_list(args.repeat, args.baseline)
    if args.reactions:
        reactions(args.repeat)


if __name__ == "__main__":
    main()
