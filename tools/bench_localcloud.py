#!/usr/bin/env python3
"""Local cloud benchmark: seconds per extra unit of a linuxWebServer deployment
(not a test).

What ``fornace up`` runs, in this process: a :class:`fornace.cli.onebox.OneBox`
(the REST API, the conductor, the local cloud), on the embedded backends
(SQLite + the folder broker) and on PostgreSQL + RabbitMQ (a database and a
vhost of the run's own, dropped after).  Each deployment goes through the REST
API as a user's would: an environment with one ``linuxWebServer`` service of
U units, deploy, wait until its job ended (every unit's agent booted, its
scripts ran and its web server answers the workflow's check), then the
environment is deleted (its agents stopped) before the next one.

U is 2 and 30 (``--units``), the sizes interleaved and repeated (``--repeat``),
the backends interleaved too.  Printed per backend: the median seconds of a
deployment of each size, the seconds per extra unit
``(median(30) - median(2)) / 28``, and the CPU seconds of the units (every
process of an instance -- its boot script, its agent, the server it left running
-- user + system time, with that of the children they reaped: the scripts the
agent ran; read from /proc just before the environment is
deleted) per unit.

    python tools/bench_localcloud.py
    python tools/bench_localcloud.py --repeat 5 --units 2,30
    python tools/bench_localcloud.py --backends embedded

Target: at most 0.1 s per extra unit between 2 and 30 units.  Exit code 0 when
every deployment succeeded (a missed target only prints MISS), 1 otherwise.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scaleout import Database, Vhost  # noqa: E402  (a tools/ sibling: made alike)

from fornace.cli.client.http import ApiClient, ClientError  # noqa: E402
from fornace.cli.main import build_conf  # noqa: E402
from fornace.cli.onebox import OneBox  # noqa: E402
from fornace.common.db.engine import upgrade  # noqa: E402
from fornace.conductor.executors import processes  # noqa: E402

TARGET = 0.1          # seconds per extra unit
JOB_TIMEOUT = 600.0
TICKS = os.sysconf("SC_CLK_TCK")


def progress(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


def site(units: int) -> dict[str, Any]:
    return {"name": "site", "type": "linuxWebServer", "port": 8080,
            "unitNamingPattern": "web#", "osImage": {"name": "local", "type": "linux"},
            "units": [{} for _ in range(units)]}


class Backend:
    """One OneBox on its own state folder (and, for production, database and vhost)."""

    def __init__(self, name: str, args: argparse.Namespace) -> None:
        self.name = name
        self.folder = Path(tempfile.mkdtemp(prefix=f"fornace-bench-localcloud-{name}-"))
        self.database: Database | None = None
        self.vhost: Vhost | None = None
        self.box: OneBox | None = None
        conf = build_conf()
        conf(["up"], project="fornace", default_config_files=[], default_config_dirs=[])
        conf.set_override("state_dir", str(self.folder / "state"), group="api")
        db = None
        if name == "production":
            tag = uuid.uuid4().hex[:8]
            self.vhost = Vhost(f"fornace-bench-localcloud-{tag}", args.amqp_user)
            self.vhost.create()
            self.database = Database(f"fornace_bench_localcloud_{tag}", "127.0.0.1", 5432,
                                     "postgres")
            self.database.create()
            db = self.database.url
            upgrade(db)
            conf.set_override("url", f"amqp://{args.amqp_user}:{args.amqp_password}@127.0.0.1:"
                                     f"5672/{urllib.parse.quote(self.vhost.name, safe='')}",
                              group="broker")
        self.box = OneBox(conf, host="127.0.0.1", port=0, db=db)
        self.box.start()
        self.client = ApiClient(self.box.url)

    def deploy(self, units: int) -> tuple[float, float, bool]:
        """(wall seconds from deploy to the job's end, the units' CPU seconds, success)."""
        client = self.client
        env = client.post("/environments", {"name": f"bench-{uuid.uuid4().hex[:6]}"})["id"]
        session = client.post(f"/environments/{env}/configure")["id"]
        client.post(f"/environments/{env}/services", site(units), session=session)
        started = time.perf_counter()
        client.post(f"/environments/{env}/sessions/{session}/deploy")
        job = client.get(f"/environments/{env}/jobs")["jobs"][0]["id"]
        deadline = time.monotonic() + JOB_TIMEOUT
        while True:
            state = client.get(f"/environments/{env}/jobs/{job}")["state"]
            if state not in ("running", "queued") or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        seconds = time.perf_counter() - started
        cpu = self.agents_cpu()
        self.delete(env)
        return seconds, cpu, state == "success"

    def agents_cpu(self) -> float:
        """User + system CPU seconds of every process of every instance and of
        the children they reaped (the scripts an agent ran)."""
        assert self.box is not None
        cloud = self.box.cloud
        infos = [info for stack in cloud.stack_names()
                 for info in cloud.instances(stack).values()]
        total = 0
        for pid in processes.members(infos):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += sum(int(f) for f in fields[11:15])   # utime stime cutime cstime
            except (OSError, IndexError, ValueError):
                pass
        return total / TICKS

    def delete(self, env: str) -> None:
        try:
            self.client.request("DELETE", f"/environments/{env}")
        except ClientError as exc:
            progress(f"{self.name}: deleting {env} failed: {exc}")
        deadline = time.monotonic() + JOB_TIMEOUT
        while time.monotonic() < deadline:
            try:
                self.client.get(f"/environments/{env}")
            except ClientError:
                break
            time.sleep(0.05)
        assert self.box is not None
        for stack in self.box.cloud.stack_names():   # whatever the deletion left
            self.box.cloud.delete(stack)

    def close(self) -> None:
        if self.box is not None:
            try:
                self.box.stop()
                for stack in self.box.cloud.stack_names():
                    self.box.cloud.delete(stack)
            finally:
                self.box = None
        for drop in (self.database, self.vhost):
            if drop is not None:
                try:
                    drop.drop() if isinstance(drop, Database) else drop.delete()
                except Exception as exc:  # noqa: BLE001 -- the others are still removed
                    progress(f"cleanup failed: {exc}")
        shutil.rmtree(self.folder, ignore_errors=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", default="2,30", metavar="A,B",
                        help="the two deployment sizes (default 2,30)")
    parser.add_argument("--repeat", type=int, default=3, metavar="N",
                        help="deployments of each size per backend (default 3)")
    parser.add_argument("--backends", default="embedded,production",
                        help="embedded (SQLite + folder broker) and/or production "
                             "(PostgreSQL + RabbitMQ) (default both)")
    parser.add_argument("--amqp-user", default="guest")
    parser.add_argument("--amqp-password", default="guest")
    args = parser.parse_args(argv)
    args.sizes = sorted({int(n) for n in args.units.split(",")})
    if len(args.sizes) != 2 or args.sizes[0] < 1:
        parser.error("--units takes two different sizes, e.g. 2,30")
    args.backends = [b for b in args.backends.split(",") if b]
    if not set(args.backends) <= {"embedded", "production"}:
        parser.error("--backends: embedded and/or production")
    if "production" in args.backends:
        try:
            socket.create_connection(("127.0.0.1", 5672), timeout=2).close()
            socket.create_connection(("127.0.0.1", 5432), timeout=2).close()
        except OSError as exc:
            parser.error(f"production needs RabbitMQ and PostgreSQL on 127.0.0.1: {exc}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    small, large = args.sizes
    backends: dict[str, Backend] = {}
    times: dict[tuple[str, int], list[float]] = {}
    cpus: dict[tuple[str, int], list[float]] = {}
    failures = 0
    try:
        for name in args.backends:
            progress(f"starting the {name} backend")
            backends[name] = Backend(name, args)
        for round_ in range(args.repeat):
            for units in ((small, large) if round_ % 2 == 0 else (large, small)):
                for name, backend in backends.items():
                    seconds, cpu, ok = backend.deploy(units)
                    failures += not ok
                    times.setdefault((name, units), []).append(seconds)
                    cpus.setdefault((name, units), []).append(cpu)
                    progress(f"{name:10} {units:3} units: {seconds:6.2f} s, units "
                             f"{cpu:5.2f} CPU s{'' if ok else '  FAILED'}")
    except KeyboardInterrupt:
        progress("interrupted")
        return 130
    finally:
        for backend in backends.values():
            backend.close()
    print(f"{'backend':12}{'units':>6}{'deploy s (median)':>20}{'unit CPU s/unit':>20}")
    verdicts = []
    for name in args.backends:
        for units in (small, large):
            print(f"{name:12}{units:>6}{statistics.median(times[name, units]):>20.2f}"
                  f"{statistics.median(cpus[name, units]) / units:>20.3f}")
        per_unit = (statistics.median(times[name, large]) -
                    statistics.median(times[name, small])) / (large - small)
        verdicts.append(f"{name}: {per_unit:.3f} s per extra unit ({small} -> {large}), "
                        f"target <= {TARGET:g}: {'PASS' if per_unit <= TARGET else 'MISS'}")
    print("\n".join(verdicts))
    if failures:
        print(f"{failures} deployment(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
