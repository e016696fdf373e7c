#!/usr/bin/env python3
"""The ``plan`` action through the API at N units, beside ``fornace workflow
simulate`` of the same model (not a test).

What a user runs: ``fornace api`` and ``fornace conductor --stacks simulator
--agents simulator`` as two processes (SQLite and the folder broker, as
``fornace up`` has them, or ``--db``/``--broker``), one environment with one
``linuxWebServer`` service of N units created through the REST API, then
``POST /environments/{id}/actions/plan``; timed from that request to the job's
end as ``GET /environments/{id}/jobs`` shows it (polled every 20 ms).
Beside it, the wall time of ``fornace workflow simulate --json`` on the same
environment (a process, start-up included, like the plan's processes which
are already running: so the simulate figure is the harder one to beat).

Printed per size: simulate seconds, plan seconds, their ratio, the tasks the
plan recorded, and the peak RSS of the API and the conductor; then the
targets: plan(1000) within 3 x simulate(1000), plan(1000)/plan(100) under 12.
``--action deploy`` times whole deployments instead (the session deployed,
until its job ends), for the conductor's memory during a 1000-unit deployment.

    python tools/bench_plan.py                     # 100 and 1000 units
    python tools/bench_plan.py --sizes 100,1000,2000 --repeat 3
    python tools/bench_plan.py --action deploy --sizes 1000 --repeat 3
    python tools/bench_plan.py --action deploy --sizes 1000 --baseline /work/wt-main

With ``--action deploy`` one run times the embedded path (SQLite + folder
broker) and the production path (PostgreSQL + RabbitMQ: a database and a
vhost of its own, dropped at the end) side by side, interleaved, beside
``fornace workflow simulate``, medians of ``--repeat`` rounds, with the API's
and the conductor's CPU seconds per job; then the targets at 1000 units:
production within 1.5 x simulate, and no slower than embedded.
``--baseline CHECKOUT`` runs the same backends from another checkout (with
its own ``.venv``) in the same rounds.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))   # ports; bench_scaleout, lazily

from ports import free_port  # noqa: E402


def environment(units: int) -> dict[str, Any]:
    """One static-site service of ``units`` units (data/examples/linux-web.json's shape)."""
    return {"id": "bench0001", "name": "bench", "services": [{
        "id": "web00001", "name": "site", "type": "linuxWebServer",
        "osImage": {"name": "debian-12", "type": "linux"}, "flavor": "m1.small",
        "unitNamingPattern": "web#", "port": 8080,
        "units": [{"id": f"unit{n:05d}", "name": f"site_instance_{n}"} for n in range(units)]}]}


def fornace(*args: str) -> list[str]:
    return [sys.executable, "-m", "fornace.cli", *args]


def peak_rss_mb(pid: int) -> float:
    """VmHWM of a live process, in MB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Api:
    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json",
                                                  **(headers or {})})
        with urllib.request.urlopen(request, timeout=600) as answer:
            text = answer.read()
        return json.loads(text) if text else None


@dataclass
class Services:
    """The API and conductor processes of one run."""

    api: subprocess.Popen
    conductor: subprocess.Popen
    port: int
    workdir: Path

    @classmethod
    def start(cls, args: argparse.Namespace, max_units: int, broker: str | None = None,
              db: str | None = None, root: Path = ROOT,
              python: str = sys.executable) -> "Services":
        """``fornace api`` and ``fornace conductor`` of the checkout ``root`` (run
        by ``python``), on ``broker`` and ``db`` (default ``--broker``/``--db``,
        else a folder broker and SQLite in a temporary folder)."""
        workdir = Path(tempfile.mkdtemp(prefix="fornace-bench-plan-"))
        broker = (args.broker if broker is None else broker) or f"filesystem:///{workdir}/broker"
        db = (args.db if db is None else db) or f"sqlite:///{workdir}/db.sqlite"
        conf = workdir / "fornace.conf"
        conf.write_text(f"[broker]\nurl = {broker}\n"
                        f"[database]\nconnection = {db}\n"
                        f"[api]\nmax_units_per_service = {max_units}\n"
                        f"max_units_per_environment = {max_units}\n"
                        f"max_body_size = {64 * 1024 * 1024}\n")
        port = free_port()
        logs = {name: open(workdir / f"{name}.log", "wb") for name in ("api", "conductor")}
        command = [python, "-m", "fornace.cli", "--config-file", str(conf)]
        api = subprocess.Popen([*command, "api", "--host", "127.0.0.1", "--port", str(port)],
                               cwd=root, stdout=logs["api"], stderr=subprocess.STDOUT,
                               start_new_session=True)
        conductor = subprocess.Popen([*command, "conductor", "--stacks", "simulator",
                                      "--agents", "simulator"],
                                     cwd=root, stdout=logs["conductor"],
                                     stderr=subprocess.STDOUT, start_new_session=True)
        services = cls(api, conductor, port, workdir)
        services.wait_ready()
        return services

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for name, process in (("api", self.api), ("conductor", self.conductor)):
                if process.poll() is not None:
                    raise SystemExit(f"fornace {name} exited ({process.returncode}):\n"
                                     f"{(self.workdir / f'{name}.log').read_text()[-3000:]}")
            try:
                Api(self.url).call("GET", "/environments")
                return
            except OSError:
                time.sleep(0.1)
        raise SystemExit("the API did not answer within 60 s")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        for process in (self.api, self.conductor):
            process.terminate()
        for process in (self.api, self.conductor):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def time_simulate(model_file: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(fornace("workflow", "simulate", "--model", str(model_file), "--json"),
                          cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"fornace workflow simulate failed ({done.returncode}):\n"
                         f"{done.stderr[-3000:]}")
    return seconds


def time_job(api: Api, model: dict[str, Any], action: str) -> tuple[float, int]:
    """Seconds from the plan (or deploy) request to the job's end, and the
    tasks it recorded."""
    env = api.call("POST", "/environments", {"name": f"bench-{time.monotonic_ns()}"})
    session = api.call("POST", f"/environments/{env['id']}/configure")
    header = {"X-Configuration-Session": session["id"]}
    for service in model["services"]:
        api.call("POST", f"/environments/{env['id']}/services", service, header)
    started = time.perf_counter()
    if action == "plan":
        job = api.call("POST", f"/environments/{env['id']}/actions/plan", {}, header)
    else:
        api.call("POST", f"/environments/{env['id']}/sessions/{session['id']}/deploy")
        job = api.call("GET", f"/environments/{env['id']}/jobs")["jobs"][0]
    while True:   # the job list: no tasks in it (the job itself has them all)
        listed = api.call("GET", f"/environments/{env['id']}/jobs")["jobs"]
        if any(j["id"] == job["id"] and j.get("finished") for j in listed):
            break
        time.sleep(0.02)
    seconds = time.perf_counter() - started
    shown = api.call("GET", f"/environments/{env['id']}/jobs/{job['id']}")
    if shown.get("state") not in ("success", "completed_w_errors"):
        raise SystemExit(f"the plan job ended {shown.get('state')}: {shown}")
    tasks = shown.get("tasks") or []
    return seconds, len(tasks)


@dataclass
class Variant:
    """One API + conductor pair timed: a backend of a checkout."""

    name: str
    services: Services
    cleanup: list[Any]        # vhost, database: removed at the end

    def stop(self) -> None:
        self.services.stop()
        for made in self.cleanup:
            try:
                made.delete() if hasattr(made, "delete") else made.drop()
            except Exception as exc:  # noqa: BLE001 -- reported, the others still go
                print(f"{self.name}: cleanup failed: {exc}", file=sys.stderr)


def start_variant(args: argparse.Namespace, name: str, backend: str, max_units: int,
                  root: Path, python: str) -> Variant:
    """``backend`` is ``embedded`` (SQLite + folder broker), ``production``
    (PostgreSQL + RabbitMQ: a database and a vhost of its own, removed at the
    end) or ``custom`` (``--db``/``--broker``)."""
    if backend == "embedded":
        return Variant(name, Services.start(args, max_units, broker="", db="", root=root,
                                            python=python), [])
    if backend == "custom":
        return Variant(name, Services.start(args, max_units, root=root, python=python), [])
    from bench_scaleout import Database, Vhost   # noqa: E402 -- they import this module
    tag = f"plan{uuid.uuid4().hex[:8]}"
    vhost = Vhost(f"fornace-{tag}", args.amqp_user)
    database = Database(f"fornace_{tag}", args.pg_host, args.pg_port, args.pg_user)
    made: list[Any] = []
    try:
        vhost.create()
        made.append(vhost)
        database.create()
        made.append(database)
        broker = (f"amqp://{args.amqp_user}:{args.amqp_password}@{args.amqp_host}:"
                  f"{args.amqp_port}/{urllib.parse.quote(vhost.name, safe='')}")
        return Variant(name, Services.start(args, max_units, broker=broker, db=database.url,
                                            root=root, python=python), made)
    except BaseException:
        for thing in made:
            thing.delete() if hasattr(thing, "delete") else thing.drop()
        raise


def profile(directory: Path, variant: Variant) -> Any:
    """bench_scaleout's py-spy profiler on the variant's API and conductor."""
    from bench_scaleout import Profiler   # noqa: E402 -- it imports this module
    targets = [types.SimpleNamespace(name=name, popen=popen) for name, popen in
               (("api", variant.services.api), ("conductor", variant.services.conductor))]
    return Profiler(directory, variant.name.replace(" ", "-"), targets, "active", 1)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process (0 when gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_job(variant: Variant, model: dict[str, Any], action: str) -> tuple[float, float, int]:
    """Wall seconds of one job, CPU seconds of its API and conductor meanwhile, tasks."""
    pids = (variant.services.api.pid, variant.services.conductor.pid)
    before = sum(cpu_seconds(pid) for pid in pids)
    seconds, tasks = time_job(Api(variant.services.url), model, action)
    return seconds, sum(cpu_seconds(pid) for pid in pids) - before, tasks


def add_backend_options(parser: argparse.ArgumentParser) -> None:
    """Where the production backends are (a vhost and a database are made there)."""
    parser.add_argument("--amqp-host", default="127.0.0.1")
    parser.add_argument("--amqp-port", type=int, default=5672)
    parser.add_argument("--amqp-user", default="guest")
    parser.add_argument("--amqp-password", default="guest")
    parser.add_argument("--pg-host", default="127.0.0.1")
    parser.add_argument("--pg-port", type=int, default=5432)
    parser.add_argument("--pg-user", default="postgres")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000", help="units, comma separated")
    parser.add_argument("--repeat", type=int, default=1, help="runs per size (medians shown)")
    parser.add_argument("--db", help="database URL (then only that backend: --backends custom)")
    parser.add_argument("--broker", help="broker URL (then only that backend: --backends custom)")
    parser.add_argument("--action", choices=("plan", "deploy"), default="plan",
                        help="the job timed: plan (default) or a whole deployment (simulated "
                             "stacks and agents)")
    parser.add_argument("--backends", help="embedded,production (the default with --action "
                        "deploy), embedded (the default with plan), or custom")
    parser.add_argument("--baseline", type=Path, metavar="CHECKOUT",
                        help="also time the same backends from another checkout (its .venv), "
                             "interleaved: e.g. a worktree of main")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="py-spy record -f raw the API and the conductor of each backend "
                             "during the timed jobs into DIR, and print where they spend it")
    parser.add_argument("--top", type=int, default=12, help="lines of each profile shown")
    add_backend_options(parser)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.backends:
        backends = args.backends.split(",")
    elif args.db or args.broker:
        backends = ["custom"]
    else:
        backends = ["embedded", "production"] if args.action == "deploy" else ["embedded"]
    checkouts = [("", ROOT, sys.executable)]
    if args.baseline:
        checkouts.append(("baseline ", args.baseline.resolve(),
                          str(args.baseline.resolve() / ".venv" / "bin" / "python")))
    variants: list[Variant] = []
    rows: dict[tuple[int, str], tuple[float, float, int]] = {}
    try:
        for label, root, python in checkouts:
            for backend in backends:
                variants.append(start_variant(args, f"{label}{backend}", backend, max(sizes),
                                              root, python))
        workdir = variants[0].services.workdir
        if args.profile:
            profilers = {variant.name: profile(args.profile, variant) for variant in variants}
        for size in sizes:
            model = environment(size)
            model_file = workdir / f"env-{size}.json"
            model_file.write_text(json.dumps(model))
            walls: dict[str, list[float]] = {variant.name: [] for variant in variants}
            cpus: dict[str, list[float]] = {variant.name: [] for variant in variants}
            simulates, simulate_cpus, tasks = [], [], 0
            for _ in range(args.repeat):   # interleaved: each variant once per round
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                simulates.append(time_simulate(model_file))
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                simulate_cpus.append(after.ru_utime + after.ru_stime
                                     - before.ru_utime - before.ru_stime)
                for variant in variants:
                    wall, cpu, tasks = timed_job(variant, model, args.action)
                    walls[variant.name].append(wall)
                    cpus[variant.name].append(cpu)
            simulate = statistics.median(simulates)
            rows[(size, "simulate")] = (simulate, 0.0, 0)
            print(f"{size:6d} units: simulate {simulate:7.2f} s (CPU "
                  f"{statistics.median(simulate_cpus):6.2f} s)", flush=True)
            for variant in variants:
                wall = statistics.median(walls[variant.name])
                cpu = statistics.median(cpus[variant.name])
                rows[(size, variant.name)] = (wall, cpu, tasks)
                print(f"{size:6d} units: {args.action} through the API, {variant.name:20s} "
                      f"{wall:7.2f} s (API + conductor CPU {cpu:6.2f} s)   "
                      f"ratio to simulate {wall / simulate:5.2f}   tasks {tasks}", flush=True)
        if args.profile:
            for name, profiler in profilers.items():
                profiler.stop()
            for name, profiler in profilers.items():
                print(f"py-spy, {name}, the timed jobs (% of the samples of threads not idle):")
                profiler.report(args.top)
        for variant in variants:
            print(f"peak RSS {variant.name}: API {peak_rss_mb(variant.services.api.pid):.0f} MB, "
                  f"conductor {peak_rss_mb(variant.services.conductor.pid):.0f} MB")
    finally:
        for variant in variants:
            variant.stop()
    if args.action == "deploy":
        if (1000, "production") in rows:
            simulate = rows[(1000, "simulate")][0]
            production = rows[(1000, "production")][0]
            print(f"target deploy(1000) on PostgreSQL + RabbitMQ <= 1.5 x simulate: "
                  f"{production / simulate:.2f} x  "
                  f"{'OK' if production <= 1.5 * simulate else 'MISSED'}")
            if (1000, "embedded") in rows:
                embedded = rows[(1000, "embedded")][0]
                print(f"target deploy(1000) production no slower than embedded: "
                      f"{production / embedded:.2f} x  "
                      f"{'OK' if production <= embedded else 'MISSED'}")
        return 0
    if (1000, backends[0]) in rows:
        simulate, plan = rows[(1000, "simulate")][0], rows[(1000, backends[0])][0]
        print(f"target plan(1000) <= 3 x simulate(1000): {plan / simulate:.2f} x  "
              f"{'OK' if plan <= 3 * simulate else 'MISSED'}")
    if (100, backends[0]) in rows and (1000, backends[0]) in rows:
        ratio = rows[(1000, backends[0])][0] / rows[(100, backends[0])][0]
        print(f"target plan(1000)/plan(100) < 12: {ratio:.2f}  {'OK' if ratio < 12 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
