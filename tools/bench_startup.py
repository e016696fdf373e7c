#!/usr/bin/env python3
"""Start-up time of the ``fornace`` command, and how soon its daemons' parts
react (not a test).

Start-up: wall seconds of ``fornace --help`` and of a few commands that only
parse their options, best and median of N runs, and the project modules each
loads.  Reactions (``--reactions``): seconds from an event to what it must
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
    python tools/bench_startup.py --reactions --repeat 5

Target: ``fornace --help`` under 0.3 s; ``fornace agent`` loads nothing of
the API or the conductor.
"""
from __future__ import annotations

import argparse
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = (["--help"], ["--version"], ["agent", "--help"], ["workflow", "--help"],
            ["env", "--help"], ["api", "--help"])


def fornace() -> list[str]:
    script = Path(sys.executable).with_name("fornace")
    return [str(script)] if script.exists() else [sys.executable, "-m", "fornace.cli"]


def seconds(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(fornace() + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    return time.perf_counter() - started


def packages_loaded(args: list[str]) -> str:
    """The fornace packages and heavy libraries the command imports."""
    code = ("import sys, runpy\nsys.argv = ['fornace', *%r]\n"
            "try:\n    runpy.run_module('fornace.cli', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "names = {m.split('.')[1] for m in sys.modules if m.startswith('fornace.')}\n"
            "heavy = [m for m in ('fastapi', 'sqlalchemy', 'lxml', 'jsonpath_ng', 'kombu', "
            "'uvicorn') if m in sys.modules]\n"
            "print(','.join(sorted(names)) + ' | ' + ','.join(heavy), file=sys.stderr)") % (args,)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "?"


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
    parser.add_argument("--reactions", action="store_true",
                        help="also how soon the daemons' parts react (brokers, conductor)")
    args = parser.parse_args()
    print(f"{'command':<24}{'best s':>8}{'median s':>10}  fornace packages | heavy libraries")
    for command in COMMANDS:
        runs = sorted(seconds(command) for _ in range(args.repeat))
        print(f"{'fornace ' + ' '.join(command):<24}{runs[0]:>8.3f}{statistics.median(runs):>10.3f}"
              f"  {packages_loaded(command)}")
    if args.reactions:
        reactions(args.repeat)


if __name__ == "__main__":
    main()
