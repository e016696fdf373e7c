#!/usr/bin/env python3
"""What a tenant's regular-expression bombs cost another tenant (not a test).

The API is served in this process (uvicorn in a thread, the package checker
of ``fornace api``), once on an SQLite database and once on a PostgreSQL one
of its own (``fornace_bench_patterns``, made through ``--admin-url`` and
dropped at the end), side by side.  Tenant ``bomber``
uploads a workflow package whose type has a backtracking bomb as a field's
``pattern`` (``^(a+)+$``: 11.6 s at 28 characters with Python's ``re``) and
a list field whose items have the largest pattern RE2 is allowed, pins an
environment to it, and then ``--bombers`` threads send service creates with
bomb-shaped values as fast as they can: ``a…a!`` for the bomb, and lists of
values each as long as one match may be -- every validation spends its whole
work budget and ends in a 400.  Meanwhile tenant ``victim`` shows its own
environment, one request after the other; the same is timed first without
the bombers.  Printed: the victim's latencies (median, p90, p99) alone and
under the bombs, the added latency, and the verdict against the target
(``--target``, 50 ms added at the p99).

    python tools/bench_package_patterns.py                  # 2 bombers, 400 requests
    python tools/bench_package_patterns.py --bombers 4 --requests 1000
"""
from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import httpx
import uvicorn

from fornace.api.app import create_app
from fornace.api.auth import NoAuth
from fornace.api.packages.store import Packages
from fornace.api.stores.jobs import Jobs
from fornace.api.stores.store import Store
from fornace.api.validationbudget import MAX_UNITS
from fornace.common.db.engine import make_engine, session_factory, upgrade
from fornace.common.patterns import compile_pattern
from fornace.conductor.packages.check import package_checker

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_api import ADMIN_URL, db_url, drop_database, recreate_database  # noqa: E402

BOMB = "^(a+)+$"
WIDE = r"(?:\w+\s?){1,150}x"    # about the largest program allowed: few characters a match
WORKFLOW = '<workflow>\n  <rule match="$[?(not @.temp.seen)]">\n' \
           '    <set path="temp.seen"><true/></set>\n  </rule>\n</workflow>\n'


def package() -> bytes:
    types = {"bombNote": {"extends": "linuxService", "schema": {"properties": {
        "text": {"type": "string", "pattern": BOMB},
        "tags": {"type": "array", "items": {"type": "string", "pattern": WIDE}}}}}}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as packed:
        packed.writestr("package.json", json.dumps({"name": "bombs", "version": "1.0"}))
        packed.writestr("workflows/Bombs.xml", WORKFLOW)
        packed.writestr("types.json", json.dumps({"types": types}))
    return buffer.getvalue()


def serve(app) -> tuple[uvicorn.Server, threading.Thread, str]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, thread, f"http://127.0.0.1:{port}"


def environment(client: httpx.Client, name: str) -> str:
    answer = client.post("/environments", json={"name": name})
    answer.raise_for_status()
    return answer.json()["id"]


def timed_shows(client: httpx.Client, env_id: str, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        start = time.perf_counter()
        client.get(f"/environments/{env_id}").raise_for_status()
        latencies.append(time.perf_counter() - start)
    return latencies


def bomb(url: str, env_id: str, stop: threading.Event, counts: dict[str, int]) -> None:
    headers = {"X-Tenant-Id": "bomber"}
    wide = "a" * (compile_pattern(WIDE).max_chars - 2) + "x"
    bodies = [{"text": "a" * 64 + "!"}, {"text": "a" * 60_000 + "!"},
              {"tags": [wide] * 60}]
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        session = client.post(f"/environments/{env_id}/configure").json()["id"]
        index = 0
        while not stop.is_set():
            body = {"type": "bombNote", "name": f"b{index}", "units": [{}],
                    "osImage": {"name": "local", "type": "linux"},
                    **bodies[index % len(bodies)]}
            answer = client.post(f"/environments/{env_id}/services", json=body,
                                 headers={"X-Configuration-Session": session})
            counts[str(answer.status_code)] = counts.get(str(answer.status_code), 0) + 1
            index += 1


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # noqa: E731
    return {"p50": statistics.median(ordered) * 1000, "p90": pick(0.9), "p99": pick(0.99)}


def measure(url: str, args: argparse.Namespace) -> tuple[dict, dict, dict[str, int]] | str:
    """The victim's latencies alone and under the bombs, and the bombs' answers, on
    the database ``url``; or why it could not be measured."""
    upgrade(url)
    engine = make_engine(url)
    store = Store(session_factory(engine), lambda body, message_id: None)
    packages = Packages(store.sessions, check=package_checker())
    app = create_app(store, NoAuth("victim", "u1"), jobs=Jobs(store), packages=packages)
    server, thread, base = serve(app)
    try:
        with httpx.Client(base_url=base, headers={"X-Tenant-Id": "bomber"},
                          timeout=60) as bomber:
            uploaded = bomber.post("/packages", content=package(),
                                   headers={"Content-Type": "application/zip"})
            if uploaded.status_code != 201:
                return f"the package was refused: {uploaded.text}"
            target = environment(bomber, "bombed")
            bomber.put(f"/environments/{target}/packages/bombs", json={}).raise_for_status()
        with httpx.Client(base_url=base, headers={"X-Tenant-Id": "victim"},
                          timeout=60) as victim:
            mine = environment(victim, "quiet")
            timed_shows(victim, mine, 50)                       # warm-up
            alone = summary(timed_shows(victim, mine, args.requests))
            stop, counts = threading.Event(), {}
            bombers = [threading.Thread(target=bomb, args=(base, target, stop, counts))
                       for _ in range(args.bombers)]
            for bomber_thread in bombers:
                bomber_thread.start()
            time.sleep(0.5)
            bombed = summary(timed_shows(victim, mine, args.requests))
            stop.set()
            for bomber_thread in bombers:
                bomber_thread.join()
    finally:
        server.should_exit = True
        thread.join(30)
        engine.dispose()
    return alone, bombed, counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bombers", type=int, default=2, help="bombing threads (2)")
    parser.add_argument("--requests", type=int, default=400,
                        help="the victim's requests per run (400)")
    parser.add_argument("--target", type=float, default=50.0,
                        help="most added p99 latency, ms (50)")
    parser.add_argument("--admin-url", default=ADMIN_URL,
                        help="PostgreSQL URL to create the benchmark's database with")
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], action="append",
                        help="only this database (repeat; default: both, side by side)")
    args = parser.parse_args()
    backends = args.backend or ["sqlite", "postgresql"]

    print(f"a tenant's show-environment latency while {args.bombers} threads of another "
          f"tenant send service creates with regex-bomb values (pattern {BOMB!r} and "
          f"lists matched against {WIDE!r}; budget {MAX_UNITS} units a validation)")
    ok = True
    with tempfile.TemporaryDirectory(prefix="fornace-bench-patterns-") as folder:
        for backend in backends:
            if backend == "sqlite":
                measured = measure(f"sqlite:///{Path(folder) / 'bench.sqlite'}", args)
            else:
                name = "fornace_bench_patterns"
                recreate_database(name, args.admin_url)
                try:
                    measured = measure(db_url(name, args.admin_url), args)
                finally:
                    drop_database(name, args.admin_url)
            if isinstance(measured, str):
                print(f"{backend}: {measured}")
                ok = False
                continue
            alone, bombed, counts = measured
            added = {key: bombed[key] - alone[key] for key in alone}
            print(f"{backend}: bomb requests answered: "
                  f"{', '.join(f'{n} x {c}' for c, n in sorted(counts.items()))}")
            for label, row, sign in (("alone", alone, ""), ("under the bombs", bombed, ""),
                                     ("added", added, "+")):
                print(f"  {label:16} p50 {row['p50']:{sign}7.1f} ms   "
                      f"p90 {row['p90']:{sign}7.1f} ms   p99 {row['p99']:{sign}7.1f} ms")
            ok = ok and added["p99"] <= args.target and not any(c.startswith("5")
                                                                 for c in counts)
    print(f"verdict: {'PASS' if ok else 'FAIL'} (added p99 <= {args.target:g} ms on "
          f"{' and '.join(backends)}, no 5xx)")
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main())
