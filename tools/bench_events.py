#!/usr/bin/env python3
"""How fast the API stores job events on PostgreSQL: one by one vs in batches (not a test).

A deployment of 1000 units sends about three task events per agent command
(pending, running, ok with its log lines); the API's consumer stored each in
a transaction of its own, and with several conductors it, not they, was the
bottleneck.  This applies the same events of a 1000-task job -- 1000
``pending`` events (the job's plan), then ``running`` and ``ok`` with log
lines for each task, fenced with the job's lock token like a conductor's --
through :meth:`fornace.api.stores.jobevents.JobEvents.apply` (one transaction
per event, as the consumer did) and :meth:`~fornace.api.stores.jobevents.JobEvents.apply_all`
(batches of ``--batch``, as it does now), each on a job of its own on
identical environments (10 services of 100 units, passwords in the
description as a real one has), and prints events/s, the CPU seconds of this
process (the API side) and of its PostgreSQL backends, and whether both
ways stored the same rows.

    python tools/bench_events.py                       # 3000 events, batches of 100
    python tools/bench_events.py --tasks 2000 --batch 50 --repeat 3
    python tools/bench_events.py --keep                # leave the database in place
    python tools/bench_events.py --deployment          # one 1000-unit deployment's messages
    python tools/bench_events.py --deployment --units 1000 --repeat 5

``--deployment`` stores, instead, what the conductor sends back of one
deployment of ``--units`` units (the mix a 1000-unit deployment through the
API sends, simulated stacks and agents: 4 reports per unit, about 30 job
events carrying task changes and node states, its trace, then its result,
most reports after the result as the two queues keep no common order), in
the consumer's batches, on PostgreSQL and on SQLite side by side, runs
interleaved, and prints per backend the CPU seconds of the API side (this
process) spent on reports, job events and the result, and of the
PostgreSQL backends (median of ``--repeat``).  Run it with another
checkout's interpreter to compare (its code, this script).

It creates a database of its own (``fornace_bench_events``, through the
``postgres`` user of 127.0.0.1) and drops it at the end unless ``--keep``;
the ``test`` database of the test suite is never used.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
PROTECTED = {"test", "postgres", "template0", "template1"}
TICKS = os.sysconf("SC_CLK_TCK")


# -- the database ---------------------------------------------------------------------------

def db_url(name: str, base: str = ADMIN_URL) -> str:
    return base.rsplit("/", 1)[0] + "/" + name


def recreate_database(name: str, admin_url: str) -> None:
    if name in PROTECTED:
        raise SystemExit(f"refusing to use database {name!r}")
    _admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')


def drop_database(name: str, admin_url: str) -> None:
    if name not in PROTECTED:
        _admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _admin(admin_url: str, *statements: str) -> None:
    from sqlalchemy import create_engine, text
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        for statement in statements:
            connection.execute(text(statement))
    engine.dispose()


class Backends:
    """The PostgreSQL server processes of an engine's connections, whose CPU
    time /proc tells (the server runs on this machine)."""

    def __init__(self, engine: Any) -> None:
        from sqlalchemy import event
        self.pids: set[int] = set()

        @event.listens_for(engine, "connect")
        def _connected(dbapi_connection: Any, _record: Any) -> None:
            with dbapi_connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.pids.add(cursor.fetchone()[0])

    def cpu(self) -> float:
        """CPU seconds used so far by the backends still running."""
        total = 0
        for pid in self.pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])   # utime, stime
        return total / TICKS


# -- the job and its events -----------------------------------------------------------------

def description(env_id: str, services: int, units: int) -> dict[str, Any]:
    return {"id": env_id, "name": f"bench-{env_id[:6]}", "services": [
        {"id": f"svc{s}-{env_id[:6]}", "name": f"web{s}", "type": "linuxWebServer",
         "adminPassword": f"P@ss-{s}-secret", "osImage": {"name": "debian"},
         "units": [{"id": f"u{s}-{u}-{env_id[:6]}", "name": f"web{s}-{u}"}
                   for u in range(units)]} for s in range(services)]}


def running_job(sessions: Any, engine: Any, services: int, units: int) -> tuple[str, str, int]:
    """A deployed environment running a deploy job that holds the lock: (env, job, token)."""
    from fornace.common.db.models import Job, Environment, new_id
    from fornace.conductor.jobs.lock import JobLock
    env_id, job_id = new_id(), new_id()
    model = description(env_id, services, units)
    with sessions.begin() as db:
        db.add(Environment(id=env_id, name=model["name"], tenant_id="bench", version=1,
                           state="deploying", description=model))
        db.flush()
        db.add(Job(id=job_id, environment_id=env_id, tenant_id="bench", kind="deploy",
                          parameters={}, description=model))
    grant = JobLock(engine).acquire(env_id, job_id, "bench-conductor")
    return env_id, job_id, grant.token


def events(env_id: str, job_id: str, token: int, tasks: int,
           count: int) -> list[tuple[dict[str, Any], str]]:
    """``count`` task events of a ``tasks``-task job, in the order a conductor sends them."""
    from fornace.common import contract

    def event(n: int, task: dict[str, Any]) -> tuple[dict[str, Any], str]:
        body = contract.fenced(contract.task_event_body(env_id, job_id, task), token)
        return body, f"{job_id}-ev-{n}"

    out = []
    for t in range(tasks):
        out.append(event(len(out), {
            "change_id": f"A{t:05d}", "target": f"u{t}", "target_name": f"web-{t}",
            "operation": "deploy", "reason": "new", "status": "pending"}))
    for t in range(tasks):
        out.append(event(len(out), {
            "change_id": f"A{t:05d}", "status": "running", "started": "2024-05-01T12:00:00Z",
            "log": [f"sending plan Deploy to web-{t}"]}))
        out.append(event(len(out), {
            "change_id": f"A{t:05d}", "status": "ok", "finished": "2024-05-01T12:00:05Z",
            "summary": f"web-{t} deployed", "digest": f"d{t}",
            "log": ["installing nginx", f"site of web-{t} answers", "done"]}))
    return out[:count]


# -- running ----------------------------------------------------------------------------------

@dataclass
class Run:
    mode: str
    events: int
    seconds: float
    cpu: float
    db_cpu: float

    def line(self) -> str:
        return (f"{self.mode:<22} {self.events:>6} events {self.seconds:7.2f} s "
                f"{self.events / self.seconds:9.0f} events/s   CPU: API {self.cpu:6.2f} s "
                f"({self.cpu / self.events * 1e3:.2f} ms/event), "
                f"PostgreSQL {self.db_cpu:5.2f} s")


def timed(mode: str, count: int, backends: Backends, apply: Callable[[], None]) -> Run:
    wall, cpu, db_cpu = time.perf_counter(), time.process_time(), backends.cpu()
    apply()
    return Run(mode, count, time.perf_counter() - wall, time.process_time() - cpu,
               backends.cpu() - db_cpu)


def _one_by_one(jobs: Any, todo: list[tuple[dict[str, Any], str]], batch: int) -> None:
    for body, message_id in todo:      # as the consumer did: a transaction per event
        jobs.apply(body, message_id)


def _batches(jobs: Any, todo: list[tuple[dict[str, Any], str]], batch: int) -> None:
    for start in range(0, len(todo), batch):
        jobs.apply_all(todo[start:start + batch])


APPLY = {"one-by-one": _one_by_one, "batches": _batches}


def _label(mode: str, batch: int) -> str:
    return f"batches of {batch}" if mode == "batches" else mode


def stored_rows(sessions: Any, job_id: str) -> list[tuple]:
    from sqlalchemy import select
    from fornace.common.db.models import JobTask
    columns = [c for c in JobTask.__table__.c
               if c.name not in ("id", "deployment_id", "environment_id", "created", "updated")]
    with sessions() as db:
        return [tuple(row) for row in db.execute(select(*columns).where(
            JobTask.deployment_id == job_id).order_by(JobTask.change_id))]


def run(args: argparse.Namespace) -> int:
    from fornace.api.stores.store import Store
    from fornace.common.db.engine import make_engine, session_factory, upgrade

    url = args.url or db_url(args.db_name, args.admin_url)
    if not args.url:
        recreate_database(args.db_name, args.admin_url)
    try:
        upgrade(url)
        engine = make_engine(url)
        backends = Backends(engine)
        sessions = session_factory(engine)
        jobs = Store(sessions, lambda body, message_id: None).job_events
        services, units = args.services, args.tasks // args.services
        print(f"PostgreSQL {url.rsplit('@', 1)[-1]}: {args.events} task events of a "
              f"{args.tasks}-task job ({services} services x {units} units), batches of "
              f"{args.batch}")
        warm = running_job(sessions, engine, services, units)   # caches, connections
        for body, message_id in events(*warm, tasks=50, count=150):
            jobs.apply(body, message_id)
        if "batches" in args.modes:
            jobs.apply_all(events(*running_job(sessions, engine, services, units),
                                  tasks=50, count=150))
        results: dict[str, list[Run]] = {mode: [] for mode in args.modes}
        same = True
        for _ in range(args.repeat):
            stored = {}
            for mode in args.modes:
                env_id, job_id, token = running_job(sessions, engine, services, units)
                todo = events(env_id, job_id, token, tasks=args.tasks, count=args.events)
                results[mode].append(timed(_label(mode, args.batch), len(todo), backends,
                                           lambda: APPLY[mode](jobs, todo, args.batch)))
                stored[mode] = stored_rows(sessions, job_id)
                print(results[mode][-1].line())
            same &= len({tuple(rows) for rows in stored.values()}) == 1
        if len(results) == 2:
            best = {mode: min(runs, key=lambda r: r.seconds) for mode, runs in results.items()}
            one, batch = best["one-by-one"], best["batches"]
            print(f"batches: {one.seconds / batch.seconds:.1f}x the events/s, "
                  f"{one.cpu / batch.cpu:.1f}x less API CPU, "
                  f"{one.db_cpu / max(batch.db_cpu, 1e-9):.1f}x less PostgreSQL CPU "
                  f"(best of {args.repeat}); same rows stored: {'yes' if same else 'NO'}")
        engine.dispose()
        return 0 if same else 1
    finally:
        if not args.url and not args.keep:
            drop_database(args.db_name, args.admin_url)



# -- one deployment's messages (--deployment) ------------------------------------------------

Batch = tuple[str, list[tuple[dict[str, Any], str]]]   # (reports | events | result, messages)


def deployment_model(env_id: str, units: int) -> dict[str, Any]:
    """One ``linuxWebServer`` service of ``units`` units (tools/bench_plan.py's
    shape), a password in it as a real one has."""
    return {"id": env_id, "name": f"bench-{env_id[:6]}", "services": [{
        "id": f"web-{env_id[:8]}", "name": "site", "type": "linuxWebServer",
        "adminPassword": f"P@ss-{env_id[:6]}-secret",
        "osImage": {"name": "debian-12", "type": "linux"}, "flavor": "m1.small",
        "unitNamingPattern": "web#", "port": 8080,
        "units": [{"id": f"unit{n:05d}", "name": f"site_instance_{n}"}
                  for n in range(units)]}]}


def deploying_job(sessions: Any, engine: Any, units: int) -> tuple[str, str, int, dict]:
    """An environment deploying a session of ``units`` units, its job holding the
    lock: (environment, job, lock token, model)."""
    from fornace.common.db.models import ConfigSession, Environment, Job, new_id
    from fornace.conductor.jobs.lock import JobLock
    env_id, job_id, session_id = new_id(), new_id(), new_id()
    model = deployment_model(env_id, units)
    with sessions.begin() as db:
        db.add(Environment(id=env_id, name=model["name"], tenant_id="bench", version=0,
                           state="deploying", description={**model, "services": []}))
        db.flush()
        db.add(ConfigSession(id=session_id, environment_id=env_id, user_id="bench",
                             version=0, state="deploying", description=model))
        db.add(Job(id=job_id, environment_id=env_id, tenant_id="bench", kind="deploy",
                   session_id=session_id, parameters={}, description=model))
    grant = JobLock(engine).acquire(env_id, job_id, "bench-conductor")
    return env_id, job_id, grant.token, model


def deployment_messages(env_id: str, job_id: str, token: int, model: dict[str, Any],
                        batch: int) -> list[Batch]:
    """What a deployment of ``model`` sends back, in the consumer's batches."""
    from fornace.common import contract
    units = [u["id"] for u in model["services"][0]["units"]]
    service = model["services"][0]["id"]
    out: list[Batch] = []
    reports: list[tuple[dict[str, Any], str]] = []

    def report(unit: str | None, text: str) -> None:
        entity = "unit" if unit else "service"
        body = contract.report_body(unit or service, entity, text, "info", env_id)
        reports.append((contract.fenced(body, token), f"{job_id}-report-{len(reports) + 1}"))

    def send_reports(upto: int) -> None:
        sent = sum(len(m) for q, m in out if q == "reports")
        for start in range(sent, upto, batch):
            out.append(("reports", reports[start:min(start + batch, upto)]))

    def event(body: dict[str, Any], name: str) -> None:
        out.append(("events", [(contract.fenced(body, token), f"{job_id}-{name}")]))

    for n, unit in enumerate(units):
        report(unit, f"Creating instance web{n + 1} (site_instance_{n})")
    for n, unit in enumerate(units):
        report(unit, f"Instance web{n + 1} (site_instance_{n}) created")
    for n, unit in enumerate(units):
        report(unit, f"Deploying the site on web{n + 1}")
    for n, unit in enumerate(units):
        report(unit, f"Web site of web{n + 1} answers at http://10.0.0.{n % 250}:8080/")
    report(None, f"Service site deployed: {len(units)} units")
    stamp = "2026-01-01T12:00:00+00:00"
    event(contract.job_event_body(env_id, job_id, "running"), "job-running")
    send_reports(len(units))
    event(contract.task_events_body(env_id, job_id, [{
        "change_id": "S0000", "target": None, "target_name": "stack",
        "operation": "update-cf-stack LinuxInstance", "reason": "new", "status": "ok",
        "started": stamp, "finished": stamp, "summary": "stack updated",
        "log": [f"resource {u} created" for u in units]}],
        {**{u: {"state": "created", "local": None} for u in units},
         service: {"state": "created", "local": "pending"}}), "events-1")
    for start in range(0, len(units), 200):   # the plans sent: tasks running
        chunk = units[start:start + 200]
        event(contract.task_events_body(env_id, job_id, [{
            "change_id": f"T{n:05d}", "target": u, "target_name": f"web{n + 1}",
            "operation": "Linux/DeployStaticSite", "reason": "new", "status": "running",
            "started": stamp, "summary": "", "digest": f"{n:016x}"}
            for n, u in enumerate(chunk, start)],
            {u: {"state": "configuring", "local": None} for u in chunk}),
            f"events-{len(out)}")
    send_reports(2 * len(units))
    for start in range(0, len(units), 40):    # their results, as they come back
        chunk = units[start:start + 40]
        event(contract.task_events_body(env_id, job_id, [{
            "change_id": f"T{n:05d}", "status": "ok", "finished": stamp,
            "summary": "ok: ok", "digest": f"{n:016x}"} for n, u in enumerate(chunk, start)],
            {u: {"state": "configured", "local": None} for u in chunk}),
            f"events-{len(out)}")
    rounds = [{"round": n, "fired": [{"rule": "deploy", "object": u, "reason": "new",
                                      "changes": {"state": ["initial", "configured"]}}]}
              for n, u in enumerate(units)]
    document = json.dumps({"rounds": rounds, "truncated": False}).encode()
    event(contract.trace_event_body(env_id, job_id, {
        "encoding": contract.TRACE_ENCODING, "size": len(document),
        "data": base64.b64encode(zlib.compress(document)).decode()}), "trace")
    final = json.loads(json.dumps(model))
    for item in [final["services"][0], *final["services"][0]["units"]]:
        item["status"] = {"state": "started", "local": "ok"}
        item["outputs"] = {"url": f"http://10.0.0.1:8080/{item['id']}"}
    out.append(("result", [(contract.fenced(contract.result_body(final), token), job_id)]))
    send_reports(len(reports))   # most reports come after the result
    return out


@dataclass
class Stored:
    backend: str
    cpu: dict[str, float]        # reports | events | result -> CPU seconds of this process
    db_cpu: float                # of the PostgreSQL backends (0 on SQLite)
    wall: float
    checked: str

    def line(self) -> str:
        total = sum(self.cpu.values())
        return (f"{self.backend:<10} API CPU {total:6.2f} s  (reports {self.cpu['reports']:5.2f}, "
                f"events {self.cpu['events']:5.2f}, result {self.cpu['result']:5.2f})  "
                f"PostgreSQL {self.db_cpu:5.2f} s  wall {self.wall:6.2f} s  {self.checked}")


def store_deployment(backend: str, store: Any, sessions: Any, engine: Any,
                     backends: Backends | None, units: int, batch: int) -> Stored:
    from sqlalchemy import func, select
    from fornace.common.db.models import Job, JobTask, Status
    env_id, job_id, token, model = deploying_job(sessions, engine, units)
    batches = deployment_messages(env_id, job_id, token, model, batch)
    apply = {"reports": store.reports.add_all, "events": store.job_events.apply_all,
             "result": store.results.apply_all}
    cpu = dict.fromkeys(apply, 0.0)
    failed = 0
    db_cpu, wall = backends.cpu() if backends else 0.0, time.perf_counter()
    for queue, messages in batches:
        started = time.process_time()
        failed += sum(o is not None for o in apply[queue](messages))
        cpu[queue] += time.process_time() - started
    wall = time.perf_counter() - wall
    db_cpu = (backends.cpu() - db_cpu) if backends else 0.0
    with sessions() as db:
        state = db.scalar(select(Job.state).where(Job.id == job_id))
        nodes = db.scalar(select(Job.nodes).where(Job.id == job_id)) or {}
        reports = db.scalar(select(func.count()).select_from(Status).where(
            Status.deployment_id == job_id))
        tasks = db.scalar(select(func.count()).select_from(JobTask).where(
            JobTask.deployment_id == job_id))
    sent = sum(len(m) for q, m in batches if q == "reports")
    good = (state == "success" and reports == sent and tasks == units + 1
            and len(nodes) == units + 1 and not failed)
    checked = ("stored: ok" if good else f"stored: WRONG (state {state}, reports {reports}/"
               f"{sent}, tasks {tasks}, nodes {len(nodes)}, failed {failed})")
    return Stored(backend, cpu, db_cpu, wall, checked)


def run_deployment(args: argparse.Namespace) -> int:
    from fornace.api.stores.store import Store
    from fornace.common.db.engine import make_engine, session_factory, upgrade

    folder = tempfile.mkdtemp(prefix="fornace-bench-events-")
    urls = {"sqlite": f"sqlite:///{folder}/bench.sqlite"}
    if not args.sqlite_only:
        urls["postgresql"] = args.url or db_url(args.db_name, args.admin_url)
        if not args.url:
            recreate_database(args.db_name, args.admin_url)
    try:
        setups = {}
        for backend, url in urls.items():
            upgrade(url)
            engine = make_engine(url)
            watched = Backends(engine) if backend == "postgresql" else None
            sessions = session_factory(engine)
            store = Store(sessions, lambda body, message_id: None)
            setups[backend] = (store, sessions, engine, watched)
            store_deployment(backend, store, sessions, engine, watched, 50, args.batch)  # warm
        print(f"one {args.units}-unit deployment's reports, job events and result, stored "
              f"as the API's consumer does (reports in batches of {args.batch}); "
              f"{args.repeat} run(s) per backend, interleaved")
        runs: dict[str, list[Stored]] = {backend: [] for backend in setups}
        for _ in range(args.repeat):
            for backend, setup in setups.items():
                runs[backend].append(store_deployment(backend, *setup, args.units, args.batch))
                print("  " + runs[backend][-1].line(), flush=True)
        print("median:")
        wrong = False
        for backend, done in runs.items():
            median = Stored(backend, {q: statistics.median(r.cpu[q] for r in done)
                                      for q in done[0].cpu},
                            statistics.median(r.db_cpu for r in done),
                            statistics.median(r.wall for r in done),
                            "stored: ok" if all(r.checked == "stored: ok" for r in done)
                            else "stored: WRONG in some run")
            wrong |= median.checked != "stored: ok"
            print("  " + median.line())
        for store, sessions, engine, watched in setups.values():
            engine.dispose()
        return 1 if wrong else 0
    finally:
        if "postgresql" in urls and not args.url and not args.keep:
            drop_database(args.db_name, args.admin_url)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000, help="tasks of the job (1000)")
    parser.add_argument("--events", type=int, default=3000, help="events applied (3000)")
    parser.add_argument("--batch", type=int, default=100, help="events per batch (100)")
    parser.add_argument("--services", type=int, default=10,
                        help="services the tasks' units belong to (10)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each way (1)")
    parser.add_argument("--modes", default="one-by-one,batches",
                        type=lambda text: [m for m in text.split(",") if m],
                        help="ways to run, of one-by-one,batches (both; one-by-one alone "
                             "also runs on a checkout without batches)")
    parser.add_argument("--db-name", default="fornace_bench_events")
    parser.add_argument("--admin-url", default=ADMIN_URL,
                        help="URL of a database to run CREATE/DROP DATABASE from")
    parser.add_argument("--url", help="use this database as it is (not created or dropped)")
    parser.add_argument("--keep", action="store_true", help="do not drop the database")
    parser.add_argument("--deployment", action="store_true",
                        help="store one deployment's reports, job events and result, on "
                             "PostgreSQL and SQLite (see above)")
    parser.add_argument("--units", type=int, default=1000,
                        help="units of the --deployment (1000)")
    parser.add_argument("--sqlite-only", action="store_true",
                        help="--deployment on SQLite alone")
    args = parser.parse_args(argv)
    unknown = [mode for mode in args.modes if mode not in APPLY]
    if unknown or not args.modes:
        parser.error(f"--modes: one-by-one and/or batches, not {','.join(unknown)!r}")
    return args


if __name__ == "__main__":
    ARGS = parse_args(None)
    sys.exit(run_deployment(ARGS) if ARGS.deployment else run(ARGS))
