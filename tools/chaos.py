#!/usr/bin/env python3
"""Chaos runs of the deployment path (not a test): faults while real
deployments run, and checks from the outside afterwards.

Starts, on a RabbitMQ virtual host and a PostgreSQL database of its own, one
``fornace api`` and ``--conductors`` ``fornace conductor --stacks local``
processes (the local cloud: each unit a sandbox running a real agent), then
for each run deploys an environment of ``--units`` static web sites and, at a
random moment of the deployment, does one of:

* ``kill-conductor``: SIGKILL the conductor holding the environment's lock
  (a new conductor is started in its place);
* ``close-connection``: close that conductor's AMQP connections from RabbitMQ
  (``rabbitmqctl close_connection``), so the broker redelivers its task;
* ``kill-agent``: SIGKILL one unit's agent while it runs a plan;
* ``kill-api``: SIGKILL the API and start it again two seconds later.

After each run it checks what happened, from the outside:

* finished: the deployment ended ``ready`` and every unit's site answers; a
  run that ended ``deploy failure`` must have an error report saying why (an
  agent killed in the middle of a plan answers it as interrupted: it is not
  run twice), else it counts as untruthful;
* doubled: a plan id started twice in one agent's journal;
* lost: the job did not end (or left a task row open) within ``--timeout``;
* two-holders: two conductors held the environment's lock at once (their
  "holds the lock" .. "released the lock"/death intervals overlap);
* left behind: after the run the environment is deleted; a process of its
  instances, its local-cloud stack or one of its queues still there once the
  API says it is gone counts (a line after the summary says how many runs).

and prints one line per run, then::

    N runs: F finished, D doubled, L lost, T two-holders, worst recovery S s

    python tools/chaos.py --runs 20
    python tools/chaos.py --runs 20 --units 8 --conductors 3 --slow 3 --strike-within 6
    python tools/chaos.py --runs 3 --faults kill-conductor --seed 7
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from urllib.parse import quote, urlsplit

import psycopg

from fornace.cli.client.http import ApiClient, ClientError
from fornace.conductor.executors.localcloud import LocalStacks

FAULTS = ("kill-conductor", "close-connection", "kill-agent", "kill-api")
AMQP = os.environ.get("FORNACE_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
POSTGRES = os.environ.get("FORNACE_TEST_DB_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)")
HOLDS = re.compile(r"environment (\S+): job (\S+) holds the lock \(token (\d+)\)")
RELEASED = re.compile(r"environment (\S+): job (\S+) (?:released the lock|it lost the environment)")


def rabbitmqctl(*args: str, check: bool = True) -> str:
    done = subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=120)
    if check and done.returncode != 0:
        raise SystemExit(f"rabbitmqctl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def private_services() -> Iterator[tuple[str, str]]:
    """(amqp URL of a new vhost, PostgreSQL URL of a new database), removed after."""
    name = f"fornace-chaos-{uuid.uuid4().hex[:8]}"
    base = urlsplit(AMQP)
    rabbitmqctl("add_vhost", name)
    db = name.replace("-", "_")
    admin = POSTGRES.replace("+psycopg", "")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    try:
        rabbitmqctl("set_permissions", "-p", name, base.username or "guest", ".*", ".*", ".*")
        amqp = f"{base.scheme}://{base.netloc}/{quote(name, safe='')}"
        yield amqp, POSTGRES.rsplit("/", 1)[0] + "/" + db
    finally:
        rabbitmqctl("delete_vhost", name, check=False)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


@dataclass
class Holder:
    pid: int
    log: Path
    killed_at: float | None = None


@dataclass
class World:
    root: Path
    config: Path
    api_port: int
    api: subprocess.Popen | None = None
    conductors: list[Holder] = field(default_factory=list)
    all_conductors: list[Holder] = field(default_factory=list)

    @property
    def client(self) -> ApiClient:
        return ApiClient(f"http://127.0.0.1:{self.api_port}")

    def spawn(self, *args: str, log: Path) -> subprocess.Popen:
        with open(log, "ab") as out:
            return subprocess.Popen([sys.executable, "-m", "fornace.cli", "--config-file",
                                     str(self.config), *args], stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def start_api(self) -> None:
        self.api = self.spawn("api", "--port", str(self.api_port), log=self.root / "api.log")
        wait(lambda: self._api_up(), 60, "the API to start")

    def _api_up(self) -> bool:
        try:
            self.client.get("/environments")
            return True
        except ClientError:
            return False

    def start_conductor(self) -> Holder:
        log = self.root / f"conductor-{len(self.all_conductors) + 1}.log"
        process = self.spawn("conductor", "--stacks", "local", log=log)
        holder = Holder(process.pid, log)
        self.conductors.append(holder)
        self.all_conductors.append(holder)
        wait(lambda: "consumer(s) on" in log.read_text(errors="replace"), 60,
             "a conductor to start")
        return holder

    def stop(self) -> None:
        for holder in self.conductors:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(holder.pid, signal.SIGTERM)
        if self.api is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.api.pid, signal.SIGTERM)


def wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def lock_holder(db_url: str, env_id: str) -> int | None:
    """The pid of the conductor holding the environment's lock now."""
    with psycopg.connect(db_url.replace("+psycopg", "")) as conn:
        row = conn.execute("SELECT holder FROM job_locks WHERE environment_id = %s",
                           (env_id,)).fetchone()
    if not row or not row[0]:
        return None
    return int(row[0].split(":")[1])


def agent_pids(cloud_dir: Path, env_id: str) -> list[int]:
    """The ``fornace agent`` processes of the environment's instances."""
    found = []
    for pid in token_processes(instance_tokens(cloud_dir, env_id)):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"agent" in argv and b"fornace.cli" in argv:
                found.append(pid)
    return found


def instance_tokens(cloud_dir: Path, env_id: str) -> list[str]:
    return [json.loads(info.read_text()).get("token")
            for info in (cloud_dir / f"e{env_id}").glob("*/instance.json")]


def token_processes(tokens: list[str]) -> list[int]:
    """Live processes carrying one of the instance tokens (agents, shells, servers)."""
    markers = {f"FORNACE_INSTANCE_TOKEN={token}".encode() for token in tokens}
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if stat.rpartition(")")[2].split()[:1] != ["Z"] and markers & set(environ):
                found.append(int(entry))
    return found


def left_behind(world: World, env_id: str, vhost: str, cloud_dir: Path) -> str:
    """Delete the environment; once the API says it is gone, what is still there."""
    tokens = instance_tokens(cloud_dir, env_id)
    with contextlib.suppress(ClientError):
        world.client.request("DELETE", f"/environments/{env_id}")

    def gone() -> bool:
        try:
            world.client.get(f"/environments/{env_id}")
            return False
        except ClientError as exc:
            return exc.status == 404
    deadline = time.monotonic() + 120
    while not gone():
        if time.monotonic() > deadline:
            return "the environment was not deleted within 120 s"
        time.sleep(0.25)
    found = []
    if processes := token_processes(tokens):
        found.append(f"{len(processes)} process(es)")
    if (cloud_dir / f"e{env_id}").exists():
        found.append("its stack")
    queues = [q for q in rabbitmqctl("list_queues", "-p", vhost, "name", "--quiet",
                                     "--no-table-headers").split() if env_id in q]
    if queues:
        found.append(f"{len(queues)} queue(s)")
    return ", ".join(found)


def slow_catalog(target: Path, seconds: float) -> Path:
    """A copy of the built-in catalog whose site deployment takes ``seconds`` longer
    (so faults strike while plans run, not after a deployment of a few seconds)."""
    from fornace.common.resources import BUILTIN_DATA

    shutil.copytree(BUILTIN_DATA, target)
    script = target / "templates" / "agent" / "scripts" / "deploy_static_site.py"
    text = script.read_text()
    marker = "def main() -> int:\n"
    if marker not in text:
        raise SystemExit(f"{script}: no {marker.strip()!r} to slow down")
    script.write_text(text.replace(marker, f"{marker}    __import__('time').sleep({seconds!r})\n", 1))
    return target


def close_connections(vhost: str, pid: int) -> int:
    """Close the AMQP connections of process ``pid`` (matched by its local ports)."""
    ports = set()
    for line in subprocess.run(["ss", "-tnpH"], capture_output=True, text=True).stdout.splitlines():
        if f"pid={pid}," in line and ":5672" in line.split()[4]:
            ports.add(line.split()[3].rsplit(":", 1)[1])
    closed = 0
    listing = rabbitmqctl("list_connections", "-p", vhost, "pid", "peer_port", "--no-table-headers",
                          "--silent")
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] in ports:
            rabbitmqctl("close_connection", parts[0], "chaos", check=False)
            closed += 1
    return closed


def deploy(world: World, units: int) -> tuple[str, str, int]:
    client = world.client
    port = free_port()
    env = client.post("/environments", {"name": f"chaos-{uuid.uuid4().hex[:6]}"})
    session = client.post(f"/environments/{env['id']}/configure")["id"]
    client.request("POST", f"/environments/{env['id']}/services",
                   {"name": "site", "type": "linuxWebServer", "unitNamingPattern": "web#",
                    "osImage": {"name": "local", "type": "linux"}, "port": port,
                    "units": [{} for _ in range(units)]}, {"X-Configuration-Session": session})
    client.post(f"/environments/{env['id']}/sessions/{session}/deploy")
    job = client.get(f"/environments/{env['id']}/jobs")["jobs"][0]["id"]
    return env["id"], job, port


def ended(world: World, env_id: str) -> dict | None:
    try:
        env = world.client.get(f"/environments/{env_id}")
    except ClientError:
        return None
    return env if env["status"] not in ("deploying", "pending", "deleting") else None


def answers(address: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{address}:{port}/", timeout=3) as response:
            return response.status == 200
    except OSError:
        return False


def doubled_plans(cloud_dir: Path, env_id: str) -> int:
    doubled = 0
    for journal in (cloud_dir / f"e{env_id}").glob("*/work/journal.jsonl"):
        started: dict[str, int] = {}
        for line in journal.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if record.get("event") == "started":
                    started[record["id"]] = started.get(record["id"], 0) + 1
        doubled += sum(1 for count in started.values() if count > 1)
    return doubled


def holder_intervals(world: World, env_id: str) -> list[tuple[float, float, int]]:
    """(from, to, conductor pid) of every time a conductor held the lock."""
    intervals = []
    for holder in world.all_conductors:
        opened = None
        for line in holder.log.read_text(errors="replace").splitlines():
            stamp = LOG_TIME.match(line)
            if not stamp or env_id not in line:
                continue
            when = datetime.datetime.fromisoformat(stamp.group(1)).timestamp()
            if HOLDS.search(line):
                opened = when
            elif RELEASED.search(line) and opened is not None:
                intervals.append((opened, when, holder.pid))
                opened = None
        if opened is not None:
            intervals.append((opened, holder.killed_at or time.time(), holder.pid))
    return intervals


def two_holders(intervals: list[tuple[float, float, int]]) -> bool:
    ordered = sorted(intervals)
    return any(b[0] < a[1] and a[2] != b[2] for a, b in zip(ordered, ordered[1:]))


def open_tasks(db_url: str, job_id: str) -> int:
    with psycopg.connect(db_url.replace("+psycopg", "")) as conn:
        return conn.execute("SELECT count(*) FROM job_tasks WHERE deployment_id = %s AND "
                            "status IN ('pending', 'running')", (job_id,)).fetchone()[0]


def fault(world: World, kind: str, env_id: str, vhost: str, db_url: str,
          cloud_dir: Path) -> str:
    if kind in ("kill-conductor", "close-connection"):
        pid = lock_holder(db_url, env_id)
        holder = next((h for h in world.conductors if h.pid == pid), None)
        if holder is None:
            return f"{kind}: no conductor held the lock at that moment"
        if kind == "close-connection":
            return f"close-connection: {close_connections(vhost, pid)} connection(s) of {pid}"
        os.killpg(pid, signal.SIGKILL)
        holder.killed_at = time.time()
        world.conductors.remove(holder)
        world.start_conductor()
        return f"kill-conductor: {pid} killed, a new one started"
    if kind == "kill-agent":
        pids = agent_pids(cloud_dir, env_id)
        if not pids:
            return "kill-agent: no agent running yet"
        victim = random.choice(pids)
        os.kill(victim, signal.SIGKILL)
        return f"kill-agent: {victim} killed"
    assert world.api is not None
    os.killpg(world.api.pid, signal.SIGKILL)
    time.sleep(2)
    world.start_api()
    return "kill-api: killed, started again"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--units", type=int, default=3)
    parser.add_argument("--conductors", type=int, default=2)
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help=f"comma-separated, from {', '.join(FAULTS)}")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per run")
    parser.add_argument("--strike-within", type=float, default=2.0, metavar="S",
                        help="the fault comes at a random moment of the first S seconds "
                             "of the deployment (a 3-unit one takes about 2-3 s here)")
    parser.add_argument("--slow", type=float, default=0.0, metavar="S",
                        help="each unit's site deployment takes S seconds more")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    faults = [f for f in args.faults.split(",") if f]
    if unknown := set(faults) - set(FAULTS):
        parser.error(f"unknown fault(s): {', '.join(sorted(unknown))}")
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="fornace-chaos-"))
    totals = {"finished": 0, "doubled": 0, "lost": 0, "two": 0, "untruthful": 0, "left": 0}
    worst = 0.0
    with private_services() as (amqp, db_url):
        vhost = urlsplit(amqp).path.lstrip("/")
        base = urlsplit(AMQP)
        cloud_dir = root / "cloud"
        config = root / "fornace.conf"
        data = f"data_dir = {slow_catalog(root / 'data', args.slow)}\n" if args.slow else ""
        config.write_text(
            f"[DEFAULT]\n{data}"
            f"[api]\nstate_dir = {root / 'state'}\n[broker]\nurl = {amqp}\n"
            f"[database]\nconnection = {db_url}\n"
            f"[conductor]\nstacks = local\ncloud_dir = {cloud_dir}\nlock_stale_after = 6\n"
            f"[engine]\nagent_timeout = 120\nagent_absent_after = 10\n"
            # what the units' agents connect to (their user data): the same vhost
            f"[rabbitmq]\nhost = {base.hostname or '127.0.0.1'}\nport = {base.port or 5672}\n"
            f"login = {base.username or 'guest'}\npassword = {base.password or 'guest'}\n"
            f"virtual_host = {vhost}\n")
        world = World(root, config, free_port())
        try:
            world.start_api()
            for _ in range(args.conductors):
                world.start_conductor()
            for run in range(1, args.runs + 1):
                kind = rng.choice(faults)
                env_id, job_id, port = deploy(world, args.units)
                time.sleep(rng.uniform(0.1, args.strike_within))
                struck = time.monotonic()
                what = fault(world, kind, env_id, vhost, db_url, cloud_dir)
                deadline = time.monotonic() + args.timeout
                env = None
                while env is None and time.monotonic() < deadline:
                    time.sleep(0.25)
                    env = ended(world, env_id)
                recovery = time.monotonic() - struck
                doubled = doubled_plans(cloud_dir, env_id)
                two = two_holders(holder_intervals(world, env_id))
                lost = env is None or open_tasks(db_url, job_id) > 0
                finished = False
                if env is not None and env["status"] == "ready":
                    units = [u for s in env["services"] for u in s["units"]]
                    finished = all(answers(u["state"]["address"], port) for u in units
                                   if u.get("state", {}).get("address"))
                why = ""
                if env is not None and env["status"] != "ready":   # truthful: says why
                    with contextlib.suppress(ClientError):
                        reports = world.client.get(
                            f"/environments/{env_id}/deployments/{job_id}")["reports"]
                        errors = [r["text"] for r in reports if r["level"] == "error"]
                        why = f" ({errors[0][:120]})" if errors else " (NO ERROR REPORT)"
                    totals["untruthful"] += why in ("", " (NO ERROR REPORT)")
                worst = max(worst, recovery if env is not None else args.timeout)
                totals["finished"] += finished
                totals["doubled"] += doubled
                totals["lost"] += lost
                totals["two"] += two
                left = left_behind(world, env_id, vhost, cloud_dir)
                totals["left"] += bool(left)
                print(f"run {run:>2}: {what}; status {env['status'] if env else 'NOT ENDED'}{why}, "
                      f"{recovery:.1f} s after the fault, doubled {doubled}, "
                      f"two holders {'YES' if two else 'no'}, "
                      f"left after deletion: {left or 'nothing'}", flush=True)
        finally:
            world.stop()
            stacks = LocalStacks(cloud_dir)
            for name in stacks.stack_names():   # whatever a failed run left running
                stacks.delete(name)
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
            else:
                print(f"work folder kept: {root}")
    print(f"{args.runs} runs: {totals['finished']} finished, {totals['doubled']} doubled, "
          f"{totals['lost']} lost, {totals['two']} two-holders, worst recovery {worst:.1f} s")
    if totals["untruthful"]:
        print(f"{totals['untruthful']} run(s) failed without an error report saying why")
    if totals["left"]:
        print(f"{totals['left']} run(s) left processes, a stack or queues after deletion")
    return 0 if not (totals["doubled"] or totals["lost"] or totals["two"]
                     or totals["untruthful"] or totals["left"]) else 1


if __name__ == "__main__":
    sys.exit(main())
