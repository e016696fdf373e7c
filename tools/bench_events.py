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

It creates a database of its own (``fornace_bench_events``, through the
``postgres`` user of 127.0.0.1) and drops it at the end unless ``--keep``;
the ``test`` database of the test suite is never used.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
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
    args = parser.parse_args(argv)
    unknown = [mode for mode in args.modes if mode not in APPLY]
    if unknown or not args.modes:
        parser.error(f"--modes: one-by-one and/or batches, not {','.join(unknown)!r}")
    return args


if __name__ == "__main__":
    sys.exit(run(parse_args(None)))
