#!/usr/bin/env python3
"""What a tenant's poison messages cost another tenant's reports (not a test).

The API's own consumer (:class:`fornace.api.server.ApiService`) stores the
reports of two deployments published as conductors publish them,
interleaved: tenant ``honest`` sends ``--reports`` plain reports, tenant
``poison`` as many reports that cannot be stored -- on PostgreSQL a NUL in
the text (the database refuses it: the batch falls back one by one and
sets it aside in the dead-letter table), on both backends a report the
contract refuses (a level it does not know: set aside unparsed).  Printed
for each backend, side by side in one run -- the embedded one (SQLite, the
folder broker) and the production one (PostgreSQL, RabbitMQ, a database and
a virtual host of their own, removed at the end) -- the time until every
honest report is stored, without and with the poison beside it, the
honest reports per second, and the dead letters kept (the time runs until
every honest report is stored and every poison report set aside).

    python tools/bench_poison.py                  # 2000 reports a tenant
    python tools/bench_poison.py --reports 5000 --backend postgresql
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator

from fastapi.testclient import TestClient

from fornace.api.server import ApiService
from fornace.cli.main import build_conf
from fornace.common import contract
from fornace.common.broker import Broker
from fornace.common.db.models import DeadLetter, Status
from sqlalchemy import func, select

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_api import ADMIN_URL, db_url, drop_database, recreate_database  # noqa: E402

AMQP = "amqp://guest:guest@127.0.0.1:5672/"


@contextlib.contextmanager
def backend(name: str, folder: Path, admin_url: str) -> Iterator[tuple[str, str]]:
    """(database URL, broker URL) of ``name``, made for this run and removed after."""
    if name == "embedded":
        folder.mkdir(parents=True, exist_ok=True)
        yield f"sqlite:///{folder / 'bench.sqlite'}", f"filesystem://{folder / 'broker'}"
        return
    database, vhost = "fornace_bench_poison", f"fornace-bench-{uuid.uuid4().hex[:8]}"
    recreate_database(database, admin_url)
    subprocess.run(["rabbitmqctl", "add_vhost", vhost], check=True, capture_output=True)
    subprocess.run(["rabbitmqctl", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"],
                   check=True, capture_output=True)
    try:
        yield db_url(database, admin_url), AMQP + vhost
    finally:
        subprocess.run(["rabbitmqctl", "delete_vhost", vhost], capture_output=True)
        drop_database(database, admin_url)


def deployment(client: TestClient, broker: Broker, tenant: str) -> tuple[str, str]:
    """A deployment of a new environment of ``tenant``: (environment id, job id)."""
    headers = {"X-Tenant-Id": tenant}
    env_id = client.post("/environments", json={"name": f"bench-{tenant}"},
                         headers=headers).json()["id"]
    session = client.post(f"/environments/{env_id}/configure", headers=headers).json()["id"]
    client.post(f"/environments/{env_id}/services/", headers={
        **headers, "X-Configuration-Session": session}, json={
        "name": "web", "type": "linuxWebServer", "osImage": {"name": "local", "type": "linux"},
        "port": 8080, "units": [{}]}).raise_for_status()
    client.post(f"/environments/{env_id}/sessions/{session}/deploy",
                headers=headers).raise_for_status()
    [(_task, job_id)] = broker.drain(contract.TASKS, timeout=5, count=1)
    return env_id, job_id


def stored(service: ApiService, job_id: str) -> int:
    """The reports of job ``job_id`` stored so far."""
    with service.store.sessions() as db:
        return db.scalar(select(func.count()).select_from(Status)
                         .where(Status.deployment_id == job_id))


def dead_letters(service: ApiService) -> int:
    with service.store.sessions() as db:
        return db.scalar(select(func.count()).select_from(DeadLetter))


def run(database: str, broker_url: str, reports: int, poisoned: bool) -> dict[str, float]:
    conf = build_conf()
    conf(["api"], default_config_files=[])
    conf.set_override("url", broker_url, group="broker")
    service = ApiService(conf, database)
    broker = Broker(broker_url)
    try:
        client = TestClient(service.app, base_url="http://localhost")   # a served Host
        honest_env, honest_job = deployment(client, broker, f"honest-{poisoned:d}")
        poison_env, poison_job = deployment(client, broker, f"poison-{poisoned:d}")
        nul = database.startswith("postgresql")
        for n in range(reports):
            if poisoned:
                text = f"poison {n} \x00" if nul and n % 2 else f"poison {n}"
                body = contract.report_body(poison_env, "environment", text, "info", poison_env)
                if not nul or n % 2 == 0:
                    body["level"] = "no-such-level"      # the contract refuses it
                broker.publish(contract.REPORTS, body, f"{poison_job}-report-{n}")
            broker.publish(contract.REPORTS, contract.report_body(
                honest_env, "environment", f"honest {n}", "info", honest_env),
                f"{honest_job}-report-{n}")
        started = time.perf_counter()
        consumer = service.start_consumers()
        while stored(service, honest_job) < reports or (
                poisoned and dead_letters(service) < reports):
            if time.perf_counter() - started > 600:
                raise SystemExit("the honest reports were not all stored in 600 s")
            time.sleep(0.05)
        took = time.perf_counter() - started
        assert consumer is not None
        return {"seconds": took, "per_second": reports / took,
                "dead": dead_letters(service)}
    finally:
        service.stop()
        broker.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", type=int, default=2000,
                        help="reports of each tenant (2000)")
    parser.add_argument("--backend", choices=["embedded", "postgresql"], action="append",
                        help="only this backend (repeat; default: both, side by side)")
    parser.add_argument("--admin-url", default=ADMIN_URL,
                        help="PostgreSQL URL to create the benchmark's database with")
    args = parser.parse_args()
    logging.getLogger("fornace").setLevel(logging.ERROR)   # a warning per dead letter
    names = args.backend or ["embedded", "postgresql"]
    rows = {}
    with tempfile.TemporaryDirectory(prefix="fornace-bench-poison-") as folder:
        for name in names:
            for poisoned in (False, True):
                with backend(name, Path(folder) / f"{name}-{poisoned:d}",
                             args.admin_url) as (database, broker_url):
                    rows[name, poisoned] = run(database, broker_url, args.reports, poisoned)
    print(f"{args.reports} reports of one tenant stored by the API's consumer, alone and "
          f"interleaved with {args.reports} poison reports of another tenant")
    print(f"  {'backend':38} {'alone':>16} {'beside the poison':>26} {'dead letters':>13}")
    label = {"embedded": "embedded (SQLite, folder broker)",
             "postgresql": "production (PostgreSQL, RabbitMQ)"}
    for name in names:
        alone, beside = rows[name, False], rows[name, True]
        print(f"  {label[name]:38} {alone['seconds']:6.2f} s {alone['per_second']:5.0f}/s"
              f" {beside['seconds']:14.2f} s {beside['per_second']:5.0f}/s"
              f" {beside['dead']:13.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
