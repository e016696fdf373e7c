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
    python tools/bench_plan.py --action deploy --sizes 1000
"""
from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
    def start(cls, args: argparse.Namespace, max_units: int) -> "Services":
        workdir = Path(tempfile.mkdtemp(prefix="fornace-bench-plan-"))
        broker = args.broker or f"filesystem:///{workdir}/broker"
        conf = workdir / "fornace.conf"
        conf.write_text(f"[broker]\nurl = {broker}\n"
                        f"[database]\nconnection = {args.db or f'sqlite:///{workdir}/db.sqlite'}\n"
                        f"[api]\nmax_units_per_service = {max_units}\n"
                        f"max_units_per_environment = {max_units}\n"
                        f"max_body_size = {64 * 1024 * 1024}\n")
        port = free_port()
        logs = {name: open(workdir / f"{name}.log", "wb") for name in ("api", "conductor")}
        api = subprocess.Popen(fornace("--config-file", str(conf), "api", "--host", "127.0.0.1",
                                       "--port", str(port)),
                               cwd=ROOT, stdout=logs["api"], stderr=subprocess.STDOUT,
                               start_new_session=True)
        conductor = subprocess.Popen(fornace("--config-file", str(conf), "conductor",
                                             "--stacks", "simulator", "--agents", "simulator"),
                                     cwd=ROOT, stdout=logs["conductor"],
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000", help="units, comma separated")
    parser.add_argument("--repeat", type=int, default=1, help="runs per size; best kept")
    parser.add_argument("--db", help="database URL (default SQLite in a temporary folder)")
    parser.add_argument("--broker", help="broker URL (default a folder broker)")
    parser.add_argument("--action", choices=("plan", "deploy"), default="plan",
                        help="the job timed: plan (default) or a whole deployment (simulated "
                             "stacks and agents)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    services = Services.start(args, max(sizes))
    api = Api(services.url)
    rows: dict[int, tuple[float, float, int]] = {}
    try:
        for size in sizes:
            model = environment(size)
            model_file = services.workdir / f"env-{size}.json"
            model_file.write_text(json.dumps(model))
            simulate = min(time_simulate(model_file) for _ in range(args.repeat))
            runs = [time_job(api, model, args.action) for _ in range(args.repeat)]
            plan, tasks = min(runs)
            rows[size] = (simulate, plan, tasks)
            print(f"{size:6d} units: simulate {simulate:7.2f} s   {args.action} through the API "
                  f"{plan:7.2f} s   ratio {plan / simulate:5.2f}   tasks {tasks}", flush=True)
        print(f"peak RSS: API {peak_rss_mb(services.api.pid):.0f} MB, "
              f"conductor {peak_rss_mb(services.conductor.pid):.0f} MB")
    finally:
        services.stop()
    if args.action != "plan":
        return 0
    if 1000 in rows:
        simulate, plan, _ = rows[1000]
        print(f"target plan(1000) <= 3 x simulate(1000): {plan / simulate:.2f} x  "
              f"{'OK' if plan <= 3 * simulate else 'MISSED'}")
    if 100 in rows and 1000 in rows:
        ratio = rows[1000][1] / rows[100][1]
        print(f"target plan(1000)/plan(100) < 12: {ratio:.2f}  {'OK' if ratio < 12 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
