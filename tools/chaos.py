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
* ``kill-api``: SIGKILL the API and start it again two seconds later;
* ``freeze-conductor``: SIGSTOP the conductor holding the lock (a paused VM, a
  stalled disk) and SIGCONT it 3 x ``lock_stale_after`` later: another
  conductor must take the job over, and finish it, within about
  ``lock_stale_after`` plus the deployment's own time, and the woken one must
  change nothing in the cloud;
* ``late-redelivery``: once the job has ended, wait past ``lock_stale_after``
  and publish its task again (the copy a tap queue on the ``tasks`` exchange
  kept): it must be acknowledged without running anything;
* ``restart-database``: restart PostgreSQL (a private cluster the tool
  starts, never the machine's) in the middle of the deployment;
* ``release-outage``: stop PostgreSQL for 3 s the moment the job's end is
  stored, when its conductor frees the environment's lock, then redeploy
  the environment: the second job must run, not be refused;
* ``kill-rabbit-node`` (with ``--cluster``): SIGKILL the RabbitMQ node the
  lock's conductor is connected to (booted again after the run).

``--cluster`` runs everything on a private 3-node RabbitMQ cluster
(``tools/rabbitcluster.py``, spare ports) with ``[broker] queue_type =
quorum`` and every node in ``[broker] url`` (the agents' too) instead of a
virtual host of the machine's RabbitMQ.

After each run it checks what happened, from the outside:

* finished: the deployment ended ``ready`` and every unit's site answers; a
  run that ended ``deploy failure`` must have an error report saying why (an
  agent killed in the middle of a plan answers it as interrupted: it is not
  run twice), else it counts as untruthful;
* doubled: a plan id started twice in one agent's journal;
* lost: the job did not end (or left a task row open) within ``--timeout``;
* two-holders: a conductor changed the cloud (started, replaced or removed an
  instance, deleted a stack) for the environment while another held its lock
  (the last "holds the lock" line before that moment is another's);
* left behind: after the run the environment is deleted; a process of its
  instances, its local-cloud stack or one of its queues still there once the
  API says it is gone counts (a line after the summary says how many runs).

and prints one line per run, then::

    N runs: F finished, D doubled, L lost, T two-holders, worst recovery S s

    python tools/chaos.py --runs 20
    python tools/chaos.py --runs 20 --units 8 --conductors 3 --slow 3 --strike-within 6
    python tools/chaos.py --runs 3 --faults kill-conductor --seed 7
    python tools/chaos.py --runs 20 --cluster --faults kill-rabbit-node,freeze-conductor
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
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from urllib.parse import quote, urlsplit

import psycopg

from fornace.cli.client.http import ApiClient, ClientError

sys.path.insert(0, str(Path(__file__).resolve().parent))   # the tools beside this one
import pgstandby  # noqa: E402
from ports import free_port  # noqa: E402
from fornace.conductor.executors.localcloud import LocalStacks

FAULTS = ("kill-conductor", "close-connection", "kill-agent", "kill-api", "freeze-conductor",
          "late-redelivery", "restart-database", "release-outage", "kill-rabbit-node")
STALE_AFTER = 6.0        # the conductors' lock_stale_after (seconds)
AMQP = os.environ.get("FORNACE_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
POSTGRES = os.environ.get("FORNACE_TEST_DB_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
CLUSTER: list = []     # the private cluster of --cluster (tools/rabbitcluster.Cluster)
AMQP_PORTS = {urlsplit(AMQP).port or 5672}


def QUEUE_TYPE() -> str:   # noqa: N802 -- read when called: --cluster sets CLUSTER
    return "quorum" if CLUSTER else "classic"

LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)")
HOLDS = re.compile(r"environment (\S+): job (\S+) holds the lock \(token (\d+)\)")
# what changes the cloud, as the conductor logs it (localcloud.py)
ACTS = re.compile(r"stack \S+(?: deleted|: (?:instance \S+ started|removing instance|"
                  r"restarting instance|replacing instance))")
AGAIN = re.compile(r"job (\S+) already ended; its task came again")


def rabbitmqctl(*args: str, check: bool = True) -> str:
    if CLUSTER:   # a node of the private cluster that runs, never the machine's
        alive = next(node for node in CLUSTER[0].nodes if node.process is not None)
        return CLUSTER[0].ctl(alive, *args, check=check)
    done = subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=120)
    if check and done.returncode != 0:
        raise SystemExit(f"rabbitmqctl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


class PrivatePostgres:
    """A PostgreSQL cluster of the tool's own (initdb in a temporary folder, a
    free port, run as the ``postgres`` user), for the faults that stop or
    restart the database: the machine's own server is never touched."""

    def __init__(self, root: Path) -> None:
        why = pgstandby.unavailable()
        if why is not None:
            raise SystemExit(f"the database faults need a private PostgreSQL: no {why}")
        self.bin, self.dir, self.port = pgstandby.server_bin(), root / "pgdata", free_port()
        self.log = root / "postgres.log"
        root.mkdir(parents=True, exist_ok=True)
        shutil.chown(root, "postgres")
        root.parent.chmod(0o711)   # the postgres user passes through the work folder
        self._as_postgres("initdb", "-D", str(self.dir), "-A", "trust", "-U", "postgres",
                          "--no-sync")
        self.start()

    def _as_postgres(self, tool: str, *args: str) -> None:
        pgstandby._as_server_user([str(self.bin / tool), *args], self.dir.parent)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        self._as_postgres("pg_ctl", "-D", str(self.dir), "-l", str(self.log), "-w", "-o",
                          f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1", "start")

    def stop(self, mode: str = "fast") -> None:
        self._as_postgres("pg_ctl", "-D", str(self.dir), "-m", mode, "-w", "stop")

    def outage(self, seconds: float) -> None:
        """A crash (immediate stop) and a start ``seconds`` later."""
        self.stop("immediate")
        time.sleep(seconds)
        self.start()


@contextlib.contextmanager
def private_services(postgres: str = POSTGRES) -> Iterator[tuple[str, str]]:
    """(amqp URL of a new vhost, PostgreSQL URL of a new database), removed after;
    the vhost has a tap queue bound to the tasks exchange (every task's copy)."""
    name = f"fornace-chaos-{uuid.uuid4().hex[:8]}"
    base = urlsplit(AMQP.split(";")[0])
    rabbitmqctl("add_vhost", name)
    db = name.replace("-", "_")
    admin = postgres.replace("+psycopg", "")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    try:
        rabbitmqctl("set_permissions", "-p", name, base.username or "guest", ".*", ".*", ".*")
        amqp = (CLUSTER[0].url(name) if CLUSTER
                else f"{base.scheme}://{base.netloc}/{quote(name, safe='')}")
        Tap(amqp).declare()
        yield amqp, postgres.rsplit("/", 1)[0] + "/" + db
    finally:
        rabbitmqctl("delete_vhost", name, check=False)
        with contextlib.suppress(psycopg.Error), \
                psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


class Tap:
    """A queue of the tool's bound to the ``tasks`` exchange: a copy of every
    task the API sends, to send one again late (``late-redelivery``)."""

    NAME = "chaos-tap"

    def __init__(self, amqp: str) -> None:
        self.amqp = amqp
        self.kept: dict[str, tuple[dict, str]] = {}   # job id -> (body, message id)

    def declare(self) -> None:
        import kombu
        from fornace.common import contract
        with kombu.Connection(self.amqp) as conn:
            kombu.Queue(self.NAME, kombu.Exchange(contract.TASKS, "direct", durable=True),
                        routing_key=contract.TASKS, durable=True,
                        queue_arguments={"x-queue-type": "quorum"} if CLUSTER else None,
                        )(conn.channel()).declare()

    def task_of(self, job_id: str) -> tuple[dict, str] | None:
        from fornace.common.broker import Broker
        with Broker(self.amqp, queue_type=QUEUE_TYPE()) as broker:
            for body, message_id in broker.drain(self.NAME, timeout=0.2):
                if isinstance(body, dict) and message_id:
                    job = body.get("job") if isinstance(body.get("job"), dict) else {}
                    self.kept[str(job.get("id") or message_id)] = (body, message_id)
        return self.kept.get(job_id)

    def send_again(self, body: dict, message_id: str) -> None:
        from fornace.common import contract
        from fornace.common.broker import Broker
        with Broker(self.amqp, queue_type=QUEUE_TYPE()) as broker:
            broker.publish(contract.TASKS, body, message_id)


@dataclass
class Holder:
    pid: int
    log: Path
    killed_at: float | None = None
    frozen_at: float | None = None


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
                os.killpg(holder.pid, signal.SIGCONT)   # a frozen one, to see the TERM
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


def broker_ports(pid: int) -> set[int]:
    """The broker ports process ``pid`` has connections to."""
    ports = set()
    for line in subprocess.run(["ss", "-tnpH"], capture_output=True, text=True).stdout.splitlines():
        fields = line.split()
        if f"pid={pid}," in line and len(fields) > 4:
            port = int(fields[4].rsplit(":", 1)[1])
            if port in AMQP_PORTS:
                ports.add(port)
    return ports


def close_connections(vhost: str, pid: int) -> int:
    """Close the AMQP connections of process ``pid`` (matched by its local ports)."""
    ports = set()
    for line in subprocess.run(["ss", "-tnpH"], capture_output=True, text=True).stdout.splitlines():
        if f"pid={pid}," in line and int(line.split()[4].rsplit(":", 1)[1]) in AMQP_PORTS:
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


def _stamped(holder: Holder, env_id: str) -> Iterator[tuple[float, str]]:
    for line in holder.log.read_text(errors="replace").splitlines():
        stamp = LOG_TIME.match(line)
        if stamp and env_id in line:
            yield datetime.datetime.fromisoformat(stamp.group(1)).timestamp(), line


def acting_out_of_turn(world: World, env_id: str) -> list[str]:
    """The cloud changes a conductor made for the environment while the lock was
    another's: the grant before each change (all conductors' "holds the lock"
    lines, by time) must be its own.  A frozen or cut-off holder that wakes after
    a takeover shows up here if it still acts."""
    grants: list[tuple[float, int]] = []
    acts: list[tuple[float, int, str]] = []
    for holder in world.all_conductors:
        for when, line in _stamped(holder, env_id):
            if HOLDS.search(line):
                grants.append((when, holder.pid))
            elif ACTS.search(line):
                acts.append((when, holder.pid, line))
    grants.sort()
    wrong = []
    for when, pid, line in acts:
        before = [owner for granted, owner in grants if granted <= when]
        if before and before[-1] != pid:
            wrong.append(f"{pid} acted while {before[-1]} held the lock: {line[:160]}")
    return wrong


def ran_again(world: World, job_id: str) -> bool:
    """A conductor said the job's late copy came and was acknowledged unrun."""
    return any(match.group(1) == job_id
               for holder in world.all_conductors
               for match in AGAIN.finditer(holder.log.read_text(errors="replace")))


def open_tasks(db_url: str, job_id: str) -> int:
    with psycopg.connect(db_url.replace("+psycopg", "")) as conn:
        return conn.execute("SELECT count(*) FROM job_tasks WHERE deployment_id = %s AND "
                            "status IN ('pending', 'running')", (job_id,)).fetchone()[0]


def fault(world: World, kind: str, env_id: str, vhost: str, db_url: str,
          cloud_dir: Path, postgres: PrivatePostgres | None) -> str:
    if kind == "restart-database":
        assert postgres is not None
        postgres.outage(2.0)
        return "restart-database: PostgreSQL down 2 s (immediate stop), started again"
    if kind == "kill-rabbit-node":
        pid = lock_holder(db_url, env_id)
        if pid is None or not CLUSTER:
            return f"{kind}: no conductor held the lock at that moment"
        nodes = [CLUSTER[0].node_of(port) for port in sorted(broker_ports(pid))]
        victim = next((node for node in nodes if node is not None and node.process), None)
        if victim is None:
            return f"{kind}: conductor {pid} had no connection to a node"
        CLUSTER[0].kill(victim)
        return f"kill-rabbit-node: {victim.name} (conductor {pid}'s) killed"
    if kind == "freeze-conductor":
        pid = lock_holder(db_url, env_id)
        holder = next((h for h in world.conductors if h.pid == pid), None)
        if holder is None:
            return f"{kind}: no conductor held the lock at that moment"
        os.killpg(pid, signal.SIGSTOP)
        holder.frozen_at = time.time()
        thaw = threading.Timer(3 * STALE_AFTER, _thaw, (pid,))
        thaw.daemon = True
        thaw.start()
        return f"freeze-conductor: {pid} stopped for {3 * STALE_AFTER:g} s"
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


def _thaw(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGCONT)


def takeover_after(world: World, env_id: str, since: float) -> float | None:
    """Seconds from a holder's freeze (after ``since``) to another conductor's
    grant (None: none)."""
    frozen = [(h.frozen_at, h.pid) for h in world.all_conductors
              if h.frozen_at and h.frozen_at >= since]
    if not frozen:
        return None
    at, pid = max(frozen)
    grants = [when for h in world.all_conductors if h.pid != pid
              for when, line in _stamped(h, env_id) if HOLDS.search(line) and when > at]
    return min(grants) - at if grants else None


def job_finished(db_url: str, job_id: str) -> bool:
    with contextlib.suppress(psycopg.Error), \
            psycopg.connect(db_url.replace("+psycopg", ""), connect_timeout=2) as conn:
        return conn.execute("SELECT finished IS NOT NULL FROM deployments WHERE id = %s",
                            (job_id,)).fetchone() == (True,)
    return False


def late_redelivery(world: World, tap: Tap, job_id: str) -> tuple[str, bool]:
    """Send the ended job's task again past lock_stale_after: (what, ran again)."""
    time.sleep(STALE_AFTER + 2)
    kept = tap.task_of(job_id)
    if kept is None:
        return "late-redelivery: the tap kept no copy of the task", False
    tap.send_again(*kept)
    deadline = time.monotonic() + 60
    while not ran_again(world, job_id):
        if time.monotonic() > deadline:
            return "late-redelivery: copy sent; NOT acknowledged as ended within 60 s", True
        time.sleep(0.2)
    return (f"late-redelivery: copy sent {STALE_AFTER + 2:g} s after the end, "
            f"acknowledged without running"), False


def redeploy(world: World, env_id: str, timeout: float) -> str:
    """Deploy the environment again (a session without changes): its job's state."""
    client = world.client
    session = client.post(f"/environments/{env_id}/configure")["id"]
    client.post(f"/environments/{env_id}/sessions/{session}/deploy")
    job = client.get(f"/environments/{env_id}/jobs")["jobs"][0]
    deadline = time.monotonic() + timeout
    while job["state"] in ("running", "queued") and time.monotonic() < deadline:
        time.sleep(0.25)
        job = next(j for j in client.get(f"/environments/{env_id}/jobs")["jobs"]
                   if j["id"] == job["id"])
    return job["state"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--units", type=int, default=3)
    parser.add_argument("--conductors", type=int, default=2)
    parser.add_argument("--faults", default=None,
                        help=f"comma-separated, from {', '.join(FAULTS)} (default: all; "
                             f"kill-rabbit-node only with --cluster)")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per run")
    parser.add_argument("--strike-within", type=float, default=2.0, metavar="S",
                        help="the fault comes at a random moment of the first S seconds "
                             "of the deployment (a 3-unit one takes about 2-3 s here)")
    parser.add_argument("--slow", type=float, default=0.0, metavar="S",
                        help="each unit's site deployment takes S seconds more")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--in-order", action="store_true",
                        help="the faults one after the other, as --faults lists them, "
                             "instead of at random")
    parser.add_argument("--cluster", action="store_true",
                        help="a private 3-node RabbitMQ cluster with quorum queues "
                             "(tools/rabbitcluster.py) instead of the machine's RabbitMQ")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    faults = ([f for f in args.faults.split(",") if f] if args.faults is not None else
              [f for f in FAULTS if args.cluster or f != "kill-rabbit-node"])
    if unknown := set(faults) - set(FAULTS):
        parser.error(f"unknown fault(s): {', '.join(sorted(unknown))}")
    if "kill-rabbit-node" in faults and not args.cluster:
        parser.error("kill-rabbit-node needs --cluster (a node of the machine's RabbitMQ "
                     "is never killed)")
    rng = random.Random(args.seed)
    if args.cluster:
        from rabbitcluster import Cluster
        CLUSTER.append(Cluster(3).start())
        AMQP_PORTS.clear()
        AMQP_PORTS.update(node.port for node in CLUSTER[0].nodes)
    try:
        return chaos(args, faults, rng)
    finally:
        if CLUSTER:
            CLUSTER[0].stop()


def chaos(args: argparse.Namespace, faults: list[str], rng: random.Random) -> int:
    """The runs, their summary and the exit status."""
    root = Path(tempfile.mkdtemp(prefix="fornace-chaos-"))
    postgres = (PrivatePostgres(root / "postgres")
                if {"restart-database", "release-outage"} & set(faults) else None)
    try:
        with private_services(postgres.url if postgres else POSTGRES) as (amqp, db_url):
            totals, worst = runs(args, faults, rng, root, amqp, db_url, postgres)
    finally:
        if postgres is not None:
            with contextlib.suppress(Exception):
                postgres.stop("immediate")
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


def runs(args: argparse.Namespace, faults: list[str], rng: random.Random, root: Path,
         amqp: str, db_url: str, postgres: PrivatePostgres | None) -> tuple[dict, float]:
    """The runs on the services made for them: (totals, worst recovery)."""
    totals = {"finished": 0, "doubled": 0, "lost": 0, "two": 0, "untruthful": 0, "left": 0}
    worst = 0.0
    vhost = urlsplit(amqp.split(";")[0]).path.lstrip("/")
    base = urlsplit(AMQP)
    cloud_dir = root / "cloud"
    config = root / "fornace.conf"
    data = f"data_dir = {slow_catalog(root / 'data', args.slow)}\n" if args.slow else ""
    config.write_text(
        f"[DEFAULT]\n{data}"
        f"[api]\nstate_dir = {root / 'state'}\n"
        f"[database]\nconnection = {db_url}\n"
        f"[conductor]\nstacks = local\ncloud_dir = {cloud_dir}\n"
        f"lock_stale_after = {STALE_AFTER:g}\n"
        f"[engine]\nagent_timeout = 120\nagent_absent_after = 10\n"
        f"[broker]\nurl = {amqp}\n"
        + ("queue_type = quorum\n" if CLUSTER else "")   # agents get every node
        + ("" if CLUSTER else
           # what the units' agents connect to (their user data): the same vhost
           f"[rabbitmq]\nhost = {base.hostname or '127.0.0.1'}\nport = {base.port or 5672}\n"
           f"login = {base.username or 'guest'}\npassword = {base.password or 'guest'}\n"
           f"virtual_host = {vhost}\n"))
    world = World(root, config, free_port())
    tap = Tap(amqp)
    try:
        world.start_api()
        for _ in range(args.conductors):
            world.start_conductor()
        for run in range(1, args.runs + 1):
            kind = faults[(run - 1) % len(faults)] if args.in_order else rng.choice(faults)
            env_id, job_id, port = deploy(world, args.units)
            what, again = "", False
            if kind == "release-outage":
                # the job's end stored: its conductor frees the lock now
                wait(lambda: job_finished(db_url, job_id), args.timeout, "the job to end")
                struck = time.monotonic()
                assert postgres is not None
                postgres.outage(3.0)
                what = "release-outage: PostgreSQL down 3 s as the job ended"
            elif kind != "late-redelivery":
                time.sleep(rng.uniform(0.1, args.strike_within))
                struck = time.monotonic()
                what = fault(world, kind, env_id, vhost, db_url, cloud_dir, postgres)
            else:
                struck = time.monotonic()
            deadline = time.monotonic() + args.timeout
            env = None
            while env is None and time.monotonic() < deadline:
                time.sleep(0.25)
                env = ended(world, env_id)
            recovery = time.monotonic() - struck
            if kind == "late-redelivery" and env is not None:
                what, again = late_redelivery(world, tap, job_id)
            if kind == "release-outage" and env is not None:
                state = redeploy(world, env_id, args.timeout)
                what += f"; a redeploy then ended {state}"
                again = state in ("refused", "running", "queued")   # not run, or not ended
                env = ended(world, env_id) or env
            if kind == "freeze-conductor" and "stopped for" in what:
                taken = takeover_after(world, env_id, time.time() - (time.monotonic() - struck))
                what += (f", taken over after {taken:.1f} s" if taken is not None
                         else ", NOT taken over")
            doubled = doubled_plans(cloud_dir, env_id) + again
            out_of_turn = acting_out_of_turn(world, env_id)
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
            totals["two"] += bool(out_of_turn)
            left = left_behind(world, env_id, vhost, cloud_dir)
            totals["left"] += bool(left)
            for node in (CLUSTER[0].nodes if CLUSTER else []):
                if node.process is None:   # killed: booted again for the next runs
                    CLUSTER[0].revive(node)
            print(f"run {run:>2}: {what}; status {env['status'] if env else 'NOT ENDED'}{why}, "
                  f"{recovery:.1f} s after the fault, doubled {doubled}, "
                  f"two holders {'YES' if out_of_turn else 'no'}, "
                  f"left after deletion: {left or 'nothing'}", flush=True)
            for line in out_of_turn:
                print(f"        {line}", flush=True)
    finally:
        world.stop()
        stacks = LocalStacks(cloud_dir)
        for name in stacks.stack_names():   # whatever a failed run left running
            stacks.delete(name)
    return totals, worst


if __name__ == "__main__":
    sys.exit(main())
