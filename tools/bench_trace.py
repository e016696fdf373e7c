#!/usr/bin/env python3
"""What a job's trace costs: a deployment through the conductor, traced and not (not a test).

One in-process :class:`fornace.conductor.daemon.Conductor` deploys an
environment of one ``linuxWebServer`` service with ``--units`` units (100 by
default) on the simulated cloud (``--agents simulator``: every agent command
answered at once), the path a real task takes: the task is published on the
broker, the conductor runs the workflows of ``data/workflows`` and sends job
events, the trace (contract 1.7), reports and the result back.  The clock runs
from the publish to the result's arrival.  Runs with tracing on and off
alternate (``--repeat`` of each, after one untimed warm-up of each), so a
machine getting busier weighs on both alike; the medians are compared.

With agents that answer at once nearly all the time is the engine's, so this
is the worst case for tracing: with real agents the same trace costs the same
milliseconds in a job that lasts minutes.

Figures printed: the trace's size (JSON bytes, and compressed as stored by
the API), its rounds and events, and the deployment time with and without
it.  Target: tracing costs at most 20 % of the deployment time.

    python tools/bench_trace.py                    # 100 units, 5 runs each
    python tools/bench_trace.py --units 500 --repeat 3
    python tools/bench_trace.py --broker amqp://guest:guest@127.0.0.1:5672//
"""
from __future__ import annotations

import argparse
import base64
import json
import statistics
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

from fornace.common import contract
from fornace.common.broker import Broker
from fornace.conductor.daemon import Conductor, ConductorSettings
from fornace.conductor.executors.simulator import SimulatedCloud
from fornace.conductor.session import Settings

DATA = Path(__file__).resolve().parent.parent / "data"
TARGET = 0.20   # tracing may add this much to the deployment time


def environment(units: int) -> dict[str, Any]:
    env_id = "b" + uuid.uuid4().hex[:12]
    return {"id": env_id, "name": f"bench-{env_id}", "services": [{
        "id": uuid.uuid4().hex, "name": "site", "type": "linuxWebServer", "port": 8080,
        "unitNamingPattern": "web#", "osImage": {"name": "local", "type": "linux"},
        "adminPassword": "Bench-Secret-1",
        "units": [{"id": uuid.uuid4().hex, "name": f"site_instance_{n}"}
                  for n in range(units)]}]}


def deploy(broker_url: str, units: int,
           packages: list[dict[str, str]] | None = None) -> tuple[float, dict | None]:
    """One deployment: seconds from publish to result, and its trace event (or None);
    ``packages``: the workflow package versions its task names (contract 1.8)."""
    model = environment(units)
    task_id = "bench-" + model["id"]
    trace = None
    with Broker(broker_url) as broker:
        started = time.perf_counter()
        broker.publish(contract.TASKS, contract.task_body(model, "tok", "bench",
                                                          packages=packages), task_id)
        while True:
            for body, message_id in broker.drain(contract.RESULTS, timeout=0.05):
                if message_id == task_id:
                    took = time.perf_counter() - started
                    result = contract.parse_result(body)
                    if any(u.get("state", {}).get("siteDeployed") is not True
                           for u in result["services"][0]["units"]):
                        raise SystemExit(f"deployment {task_id} did not deploy every unit")
                    broker.drain(contract.REPORTS, timeout=0.05)
                    return took, trace
                if message_id == f"{task_id}-trace":
                    trace = contract.parse_job_event(body).trace


def conductor(broker_url: str, traced: bool) -> Conductor:
    daemon = Conductor(ConductorSettings(broker_url=broker_url, data_dir=DATA,
                                         max_environments=1, agents="simulator",
                                         trace=traced, engine=Settings(agent_timeout=600)),
                       lambda task: SimulatedCloud().executors()[0])
    daemon.start()
    if not daemon.wait_ready():
        raise SystemExit("the conductor did not start")
    return daemon


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--broker", default="memory://bench-trace")
    args = parser.parse_args()

    times: dict[bool, list[float]] = {True: [], False: []}
    trace = None
    for run in range(args.repeat + 1):
        for traced in (True, False):
            daemon = conductor(args.broker, traced)   # started and stopped outside the clock
            try:
                took, sent = deploy(args.broker, args.units)
            finally:
                daemon.shutdown()
            if run:                                   # the first of each is a warm-up
                times[traced].append(took)
            if traced:
                trace = sent
    if trace is None:
        raise SystemExit("no trace was sent")
    compressed = base64.b64decode(trace["data"])
    document = json.loads(zlib.decompress(compressed))
    events = sum(len(r["events"]) for r in document["rounds"])
    on, off = statistics.median(times[True]), statistics.median(times[False])
    cost = on / off - 1
    print(f"deployment of {args.units} units through the conductor "
          f"(simulated cloud, broker {args.broker.split('@')[-1]}), "
          f"median of {args.repeat} runs each")
    print(f"  trace: {trace['size']:,} bytes of JSON, {len(compressed):,} bytes compressed "
          f"(stored), {len(trace['data']):,} bytes in its message; "
          f"{len(document['rounds'])} rounds, {events:,} events"
          + (" (truncated)" if document.get("truncated") else ""))
    print(f"  tracing off: {off * 1000:8.1f} ms   ({', '.join(f'{t * 1000:.0f}' for t in times[False])})")
    print(f"  tracing on:  {on * 1000:8.1f} ms   ({', '.join(f'{t * 1000:.0f}' for t in times[True])})")
    print(f"  tracing costs {cost * 100:+.1f} % (target: at most {TARGET * 100:.0f} %) "
          f"{'ok' if cost <= TARGET else 'MISS'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
