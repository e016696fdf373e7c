#!/usr/bin/env python3
"""Load benchmark of the REST API on PostgreSQL (not a test).

It creates a database of its own (``fornace_bench`` by default, through the
``postgres`` user of 127.0.0.1), brings it to the current schema, seeds
environments directly through :class:`fornace.api.stores.store.Store` (fast: no HTTP), then
starts the API server for real in a separate process -- ``fornace api`` by
default, or ``python -m uvicorn`` on :func:`server_app` with ``--server
uvicorn --workers N`` -- and drives it over HTTP, open loop: request *i* is
due at ``start + i / rate`` whatever the server does, and its latency is
counted from that due time (so a stalled server cannot hide its queue).

Two runs, each after a short warm-up that is not counted:

* ``mixed``: list environments, show environment, configure (open a session),
  post a service to the session, deploy the session.  A small "conductor"
  thread of this process completes each deployment half a second later
  (``store.results.apply``), so environments go back to ``ready`` and can be
  configured again.
* ``read``: only show and list.  The verdict is about this run: p99 under
  25 ms for show and for list at the target rate, with no errors.
* ``wrk``: the most list and show serve (closed loop, ``wrk`` with
  ``--wrk-connections`` connections; the built-in client when wrk is absent),
  beside a bare FastAPI + uvicorn app (:func:`bare_app`) serving the very
  answers the API gave (captured before the run) on the same uvicorn stack
  (httptools/uvloop when installed, access log on as ``fornace api`` has it):
  the two servers run one after the other, ``--wrk-rounds`` times,
  interleaved, and the medians are printed with their ratio.  The verdict
  wants the API at least half the bare app's rate for both.  A third server
  runs in the same rounds: the bare app with the one query each call cannot
  do without (:func:`bare_db_app`), the floor of FastAPI + SQLAlchemy +
  psycopg on PostgreSQL for that call.

The load generator is one asyncio loop with a minimal HTTP/1.1 keep-alive
client (``--client httpx`` uses httpx.AsyncClient instead): the machine may
have few cores and the client competes with the server and PostgreSQL.  The
CPU used by the client, the server and PostgreSQL during each run is printed
(100 % = one core).

    python tools/bench_api.py                          # 300 req/s, 20 s per run
    python tools/bench_api.py --rate 500 --seconds 30 --runs read
    python tools/bench_api.py --server uvicorn --workers 2
    pip install --target /tmp/uv httptools uvloop    # uvicorn[standard]'s parser and loop,
    python tools/bench_api.py --server-path /tmp/uv  # for the server only
    python tools/bench_api.py --py-spy /tmp/api.svg    # profile the server (py-spy;
                                                       # .txt: collapsed stacks)
    python tools/bench_api.py --keep                   # leave fornace_bench in place
    python tools/bench_api.py --runs read,wrk --wrk-rounds 5

The database is dropped at the end unless ``--keep``; the ``test`` database
of the test suite is never used.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import queue
import random
import shutil
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ports import free_port  # noqa: E402  (one piece of code for the tools' free ports)

ROOT = Path(__file__).resolve().parent.parent

TARGET_P99_MS = 25.0
TARGET_RATIO = 0.5      # list and show: at least half the bare app's requests/s
TARGET_CALLS = ("show", "list")
ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
PROTECTED = {"test", "postgres", "template0", "template1"}
USER = "bench-user"


# -- database ---------------------------------------------------------------------------

def db_url(name: str, base: str = ADMIN_URL) -> str:
    return base.rsplit("/", 1)[0] + "/" + name


def recreate_database(name: str, admin_url: str) -> None:
    if name in PROTECTED:
        raise SystemExit(f"refusing to use database {name!r}")
    from sqlalchemy import create_engine, text
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()


def drop_database(name: str, admin_url: str) -> None:
    if name in PROTECTED:
        return
    from sqlalchemy import create_engine, text
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()


def analyze(url: str) -> None:
    """Fresh statistics for the planner, as a live database would have."""
    from sqlalchemy import create_engine, text
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text("VACUUM ANALYZE"))
    engine.dispose()


def web_server(name: str) -> dict[str, Any]:
    return {"name": name, "type": "webServer", "adminPassword": "P@ssw0rd-web",
            "domain": "acme.loc", "units": [{"location": "west-dc"}, {"location": "east-dc"}]}


@dataclass
class Env:
    id: str
    tenant: str
    state: str  # seeded kind: empty | deployed | pending | deploying


def make_store(url: str):
    from fornace.common.db.engine import make_engine, session_factory
    from fornace.api.stores.store import Store
    engine = make_engine(url)
    return Store(session_factory(engine), lambda body, message_id: None), engine


def finish(store: Any, env_id: str, session_id: str) -> None:
    """What the conductor would send back: a report, then the final model."""
    from fornace.common.db.models import ConfigSession
    with store._sessions() as db:
        model = dict(db.get(ConfigSession, session_id).description)
    for service in model.get("services") or []:
        for unit in service.get("units") or []:
            unit["state"] = {"hostname": f"{unit.get('name', 'unit')}.acme.loc"}
    store.reports.add({"id": model["services"][0]["id"] if model.get("services") else None,
                      "entity": "service" if model.get("services") else None,
                       "text": "deployment finished", "level": "info",
                       "environment_id": env_id}, None)
    store.results.apply(model, None)


def seed(url: str, count: int, tenants: int, threads: int = 4) -> list[Env]:
    """``count`` environments over ``tenants`` tenants, through the Store.

    Of every 20: 5 empty (never deployed), 11 deployed (1-3 services), 3 with
    an open session holding a new service (status ``pending``), 1 deploying.
    """
    from fornace.api.context import Context
    store, engine = make_store(url)
    kinds = (["empty"] * 5 + ["deployed"] * 11 + ["pending"] * 3 + ["deploying"])
    plan = [(f"tenant-{i % tenants}", kinds[i % len(kinds)], i) for i in range(count)]
    envs: list[Env] = []
    lock = threading.Lock()

    def one(tenant: str, kind: str, index: int) -> None:
        ctx = Context(tenant_id=tenant, user_id=USER)
        env = store.environments.create(ctx, f"env-{index:05d}")
        if kind in ("deployed", "pending", "deploying"):
            session = store.config_sessions.open(ctx, env["id"])["id"]
            for n in range(1 + index % 3 if kind == "deployed" else 1):
                store.services.post(ctx, env["id"], "", web_server(f"web{n}"), session)
            if kind in ("deployed", "deploying"):
                store.config_sessions.deploy(ctx, env["id"], session)
                if kind == "deployed":
                    finish(store, env["id"], session)
            if kind == "deployed" and random.Random(index).random() < 0.3:  # a change on top
                session = store.config_sessions.open(ctx, env["id"])["id"]
                store.services.post(ctx, env["id"], "", web_server("extra"), session)
                kind = "pending"
        with lock:
            envs.append(Env(env["id"], tenant, kind))

    work: queue.Queue = queue.Queue()
    for item in plan:
        work.put(item)
    errors: list[BaseException] = []

    def worker() -> None:
        while True:
            try:
                item = work.get_nowait()
            except queue.Empty:
                return
            try:
                one(*item)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    engine.dispose()
    if errors:
        raise errors[0]
    envs.sort(key=lambda e: e.id)
    return envs


# -- server -----------------------------------------------------------------------------

def server_app():
    """App factory for ``--server uvicorn`` (one per worker process)."""
    from oslo_config import cfg

    from fornace.api import config as api_config
    from fornace.api.server import ApiService
    from fornace.conductor import config as conductor_config

    conf = cfg.ConfigOpts()
    conductor_config.register(conf)
    api_config.register(conf)
    conf([], project="fornace-bench", default_config_files=[], default_config_dirs=[])
    service = ApiService(conf, os.environ["FORNACE_BENCH_DB"])
    service.start_consumers()
    return service.app


def bare_app():
    """App factory of ``--server bare``: FastAPI with only list and show, each
    answering the payload the real API gave (``FORNACE_BENCH_PAYLOADS``, a JSON
    file ``{"list": ..., "show": ...}``) -- what the stack alone costs."""
    return _bare(with_query=False)


def bare_db_app():
    """App factory of ``--server bare-db``: :func:`bare_app`, each request also
    running the one query its call cannot do without on the same PostgreSQL
    (the tenant's environments' rows; the environment's row), through
    SQLAlchemy Core on the engine Fornace makes, in the thread pool as the
    API runs its stores -- the floor of the chosen stack (FastAPI, SQLAlchemy,
    psycopg) for these calls, with no authentication, policy, middleware,
    logging or view of Fornace's."""
    return _bare(with_query=True)


def _bare(with_query: bool):
    from fastapi import FastAPI
    from starlette.concurrency import run_in_threadpool

    payloads = json.loads(Path(os.environ["FORNACE_BENCH_PAYLOADS"]).read_text())
    app = FastAPI()
    queries: dict[str, Any] = {}   # call -> its query, run before the answer
    if with_query:
        from sqlalchemy import select

        from fornace.common.db.engine import make_engine
        from fornace.common.db.models import Environment

        engine = make_engine(os.environ["FORNACE_BENCH_DB"], pre_ping=False)
        tenant = payloads["list"]["environments"][0]["tenant_id"]
        rows = select(Environment.id, Environment.name, Environment.created,
                      Environment.updated, Environment.tenant_id, Environment.version,
                      Environment.state).where(Environment.tenant_id == tenant)

        def listed(_: None) -> None:
            with engine.connect() as connection:
                connection.execute(rows).all()

        def shown(env_id: str) -> None:
            with engine.connect() as connection:
                connection.execute(select(Environment).where(Environment.id == env_id)).one()
        queries.update(list=listed, show=shown)

    @app.get("/environments")
    async def list_environments() -> dict:
        if queries:
            await run_in_threadpool(queries["list"], None)
        return payloads["list"]

    @app.get("/environments/{env_id}")
    async def show_environment(env_id: str) -> dict:
        if queries:
            await run_in_threadpool(queries["show"], env_id)
        return payloads["show"]
    return app


@dataclass
class Server:
    process: subprocess.Popen
    port: int
    log: Path
    workdir: Path
    stack: str

    def pids(self) -> list[int]:
        """The server process and its children (uvicorn workers, py-spy's target)."""
        pids = [self.process.pid]
        for pid in list(pids):
            try:
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                continue
            pids.extend(int(c) for c in children)
            for child in children:
                try:
                    pids.extend(int(g) for g in Path(
                        f"/proc/{child}/task/{child}/children").read_text().split())
                except OSError:
                    pass
        return pids


def server_stack(env: dict[str, str]) -> str:
    """What uvicorn's "auto" picks in the server's environment."""
    probe = ("import importlib.util as u, uvicorn;"
             "print('uvicorn', uvicorn.__version__,"
             " 'httptools' if u.find_spec('httptools') else 'h11',"
             " 'uvloop' if u.find_spec('uvloop') else 'asyncio')")
    return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                          text=True, check=False).stdout.strip()


def start_server(args: argparse.Namespace, url: str) -> Server:
    port = args.port or free_port()
    workdir = Path(tempfile.mkdtemp(prefix="fornace-bench-"))
    conf_file = workdir / "fornace.conf"
    conf_file.write_text(f"[broker]\nurl = {args.broker if args.workers > 1 else 'memory://'}\n")
    if args.server in ("bare", "bare-db"):
        factory = {"bare": "bare_app", "bare-db": "bare_db_app"}[args.server]
        command = [sys.executable, "-m", "uvicorn", f"tools.bench_api:{factory}", "--factory",
                   "--host", "127.0.0.1", "--port", str(port), "--log-level", "info"]
    elif args.server == "fornace":
        command = [sys.executable, "-m", "fornace.cli", "--config-file", str(conf_file),
                   "api", "--host", "127.0.0.1", "--port", str(port), "--db", url,
                   "--workers", str(args.workers)]
    else:
        command = [sys.executable, "-m", "uvicorn", "tools.bench_api:server_app", "--factory",
                   "--host", "127.0.0.1", "--port", str(port), "--workers", str(args.workers),
                   "--log-level", "info"]  # with the access log, like `fornace api`
        if args.no_access_log:
            command.append("--no-access-log")
    if args.py_spy and not args.server.startswith("bare"):
        if not shutil.which("py-spy"):
            raise SystemExit("py-spy is not installed (pip install py-spy)")
        out = Path(args.py_spy).resolve()
        kind = {".txt": "raw", ".json": "speedscope"}.get(out.suffix, "flamegraph")
        command = ["py-spy", "record", "--subprocesses", "--rate", "100", "--format", kind,
                   *(["--idle", "--gil"] if args.py_spy_gil else []),
                   "-o", str(out), "--"] + command
    path = [*args.server_path, os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "FORNACE_BENCH_DB": url,
           "FORNACE_BENCH_PAYLOADS": str(getattr(args, "payloads", "")),
           "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    log = workdir / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(process, port, log, workdir, server_stack(env))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited ({process.returncode}):\n{log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"GET /environments HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             b"Connection: close\r\n\r\n")
                if sock.recv(12).startswith(b"HTTP/1.1 200"):
                    time.sleep(0.5 if args.workers > 1 else 0)
                    return server
        except OSError:
            pass
        time.sleep(0.2)
    stop_server(server)
    raise SystemExit(f"the server did not start in 60 s:\n{log.read_text()}")


def stop_server(server: Server) -> None:
    if server.process.poll() is None:
        # SIGINT: uvicorn shuts down cleanly and py-spy writes its profile
        os.killpg(server.process.pid, signal.SIGINT)
        try:
            server.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait()


# -- CPU accounting -------------------------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """User + system seconds of ``pid`` (its threads included)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def postgres_pids() -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/comm").read_text().strip() == "postgres":
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


class CpuMeter:
    """CPU seconds used by this process, the server and PostgreSQL over a run."""

    def __init__(self, server: Server) -> None:
        self.server = server

    @staticmethod
    def busy() -> float:
        """CPU seconds the whole machine has been busy (all cores)."""
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        values = [int(v) for v in fields]
        return (sum(values) - values[3] - values[4]) / TICK  # minus idle and iowait

    def start(self) -> None:
        self.busy0 = self.busy()
        self.t0, self.client0 = time.monotonic(), time.process_time()
        self.server0 = {p: proc_cpu(p) for p in self.server.pids()}
        self.pg0 = {p: proc_cpu(p) for p in postgres_pids()}

    def stop(self) -> dict[str, float]:
        wall = max(time.monotonic() - self.t0, 1e-9)
        client = time.process_time() - self.client0
        # processes that come and go: what they used since the start (or since they began)
        server = sum(proc_cpu(p) - self.server0.get(p, 0.0) for p in self.server.pids())
        pg = sum(proc_cpu(p) - self.pg0.get(p, 0.0) for p in postgres_pids())
        other = self.busy() - self.busy0 - client - server - pg
        return {"client": 100 * client / wall, "server": 100 * server / wall,
                "postgres": 100 * pg / wall, "other": max(0.0, 100 * other / wall),
                "cores": os.cpu_count() or 1}


# -- HTTP clients ---------------------------------------------------------------------------

class HttpError(Exception):
    pass


class RawClient:
    """HTTP/1.1 keep-alive connections on asyncio streams; JSON in, bytes out."""

    def __init__(self, host: str, port: int, limit: int) -> None:
        self.host, self.port = host, port
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._slots = asyncio.Semaphore(limit)
        self.opened = 0

    async def request(self, method: str, path: str, headers: dict[str, str],
                      body: Any = None) -> tuple[int, bytes]:
        payload = b"" if body is None else json.dumps(body).encode()
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}",
                f"Content-Length: {len(payload)}"]
        if body is not None:
            head.append("Content-Type: application/json")
        head.extend(f"{k}: {v}" for k, v in headers.items())
        data = ("\r\n".join(head) + "\r\n\r\n").encode() + payload
        async with self._slots:
            while True:
                reused = bool(self._idle)
                if reused:
                    reader, writer = self._idle.pop()
                else:
                    reader, writer = await asyncio.open_connection(self.host, self.port)
                    self.opened += 1
                try:
                    writer.write(data)
                    status, content, keep = await self._response(reader)
                except (ConnectionError, asyncio.IncompleteReadError, HttpError) as exc:
                    writer.close()
                    if reused and isinstance(exc, (ConnectionError,
                                                   asyncio.IncompleteReadError)):
                        continue  # the server closed an idle connection: retry on a new one
                    raise
                if keep:
                    self._idle.append((reader, writer))
                else:
                    writer.close()
                return status, content

    @staticmethod
    async def _response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
        line = await reader.readuntil(b"\r\n")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise HttpError(f"bad status line {line[:60]!r}")
        status = int(parts[1])
        length, chunked, keep = None, False, True
        while True:
            line = await reader.readuntil(b"\r\n")
            if line == b"\r\n":
                break
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            value = value.strip()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"connection" and value.lower() == b"close":
                keep = False
        if chunked:
            chunks = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    while await reader.readuntil(b"\r\n") != b"\r\n":
                        pass
                    break
                chunks.append(await reader.readexactly(size))
                await reader.readexactly(2)
            return status, b"".join(chunks), keep
        if length is None:
            raise HttpError("response without Content-Length")
        return status, await reader.readexactly(length), keep

    async def close(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()


class HttpxClient:
    def __init__(self, host: str, port: int, limit: int) -> None:
        import httpx
        self._client = httpx.AsyncClient(
            base_url=f"http://{host}:{port}", timeout=30,
            limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit))
        self.opened = 0

    async def request(self, method: str, path: str, headers: dict[str, str],
                      body: Any = None) -> tuple[int, bytes]:
        response = await self._client.request(method, path, headers=headers,
                                               json=body)
        return response.status_code, response.content

    async def close(self) -> None:
        await self._client.aclose()


# -- the load -------------------------------------------------------------------------------

@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(
        default_factory=lambda: collections.defaultdict(list))
    errors: collections.Counter = field(default_factory=collections.Counter)
    samples: dict[str, str] = field(default_factory=dict)
    substituted: int = 0

    def error(self, call: str, what: str) -> None:
        self.errors[call] += 1
        self.samples.setdefault(call, what)


class Workload:
    """Picks the next call and keeps track of the environments being worked on."""

    def __init__(self, envs: list[Env], tenants: int, mix: dict[str, float],
                 rng: random.Random) -> None:
        self.envs = envs
        self.tenants = [f"tenant-{i}" for i in range(tenants)]
        self.calls = list(mix)
        self.weights = [mix[c] for c in self.calls]
        self.rng = rng
        # environments the mixed run may configure/deploy (not busy at seed time)
        self.idle = [e for e in envs if e.state != "deploying"]
        rng.shuffle(self.idle)
        self.configured: collections.deque = collections.deque()  # (env, session) open
        self.ready: collections.deque = collections.deque()  # (env, session) with a service
        self.serial = 0

    @staticmethod
    def headers(tenant: str, session: str | None = None) -> dict[str, str]:
        headers = {"X-Tenant-Id": tenant, "X-User-Id": USER}
        if session:
            headers["X-Configuration-Session"] = session
        return headers

    def next(self) -> tuple[str, Callable]:
        """The next call, bound now to the environment (and session) it works on."""
        call = self.rng.choices(self.calls, self.weights)[0]
        if call == "configure" and not self.idle:
            call = "show"
        elif call == "post service" and not self.configured:
            call = "configure" if self.idle else "show"
        elif call == "deploy" and not self.ready:
            call = "post service" if self.configured else "show"
        if call == "list":
            tenant = self.rng.choice(self.tenants)
            return call, lambda client: client.request("GET", "/environments",
                                                       self.headers(tenant))
        if call == "show":
            env = self.rng.choice(self.envs)
            return call, lambda client: client.request("GET", f"/environments/{env.id}",
                                                       self.headers(env.tenant))
        if call == "configure":
            return call, self._configure(self.idle.pop())
        if call == "post service":
            return call, self._post_service(*self.configured.popleft())
        return call, self._deploy(*self.ready.popleft())

    def _configure(self, env: Env) -> Callable:
        async def action(client: Any) -> tuple[int, bytes]:
            status, content = await client.request(
                "POST", f"/environments/{env.id}/configure", self.headers(env.tenant))
            if status == 200:
                self.configured.append((env, json.loads(content)["id"]))
            else:
                self.idle.insert(0, env)
            return status, content
        return action

    def _post_service(self, env: Env, session: str) -> Callable:
        self.serial += 1
        service = web_server(f"web-{self.serial}")

        async def action(client: Any) -> tuple[int, bytes]:
            status, content = await client.request(
                "POST", f"/environments/{env.id}/services",
                self.headers(env.tenant, session), service)
            if status == 200:
                self.ready.append((env, session))
            else:
                self.idle.insert(0, env)
            return status, content
        return action

    def _deploy(self, env: Env, session: str) -> Callable:
        async def action(client: Any) -> tuple[int, bytes]:
            status, content = await client.request(
                "POST", f"/environments/{env.id}/sessions/{session}/deploy",
                self.headers(env.tenant))
            if status == 200:
                self.conductor.put((time.monotonic() + 0.5, env, session))
            else:
                self.idle.insert(0, env)
            return status, content
        return action


class Conductor(threading.Thread):
    """Completes deployments half a second after they start, like a fast conductor."""

    def __init__(self, url: str, loop: asyncio.AbstractEventLoop, workload: Workload) -> None:
        super().__init__(name="bench-conductor", daemon=True)
        self.store, self.engine = make_store(url)
        self.loop, self.workload = loop, workload
        self.inbox: queue.Queue = queue.Queue()
        self.failures: list[str] = []
        workload.conductor = self.inbox

    def run(self) -> None:
        while True:
            item = self.inbox.get()
            if item is None:
                break
            due, env, session = item
            time.sleep(max(0.0, due - time.monotonic()))
            try:
                finish(self.store, env.id, session)
            except Exception as exc:  # pragma: no cover - reported
                self.failures.append(f"{type(exc).__name__}: {exc}")
                continue
            self.loop.call_soon_threadsafe(self.workload.idle.insert, 0, env)

    def stop(self) -> None:
        self.inbox.put(None)
        self.join(timeout=30)
        self.engine.dispose()


async def drive(client: Any, workload: Workload, rate: float, seconds: float,
                stats: Stats | None) -> float:
    """Send ``rate * seconds`` requests open loop; return the wall time of the run."""
    loop = asyncio.get_running_loop()
    total = int(rate * seconds)
    pending: set[asyncio.Task] = set()

    async def one(call: str, action: Callable, due: float) -> None:
        try:
            status, content = await action(client)
        except Exception as exc:
            if stats is not None:
                stats.error(call, f"{type(exc).__name__}: {exc}")
            return
        done = loop.time()
        if stats is None:
            return
        if status != 200:
            stats.error(call, f"HTTP {status}: {content[:200]!r}")
        else:
            stats.latencies[call].append((done - due) * 1000)

    start = loop.time() + 0.05
    for i in range(total):
        due = start + i / rate
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        call, action = workload.next()
        task = asyncio.create_task(one(call, action, due))
        pending.add(task)
        task.add_done_callback(pending.discard)
    if pending:
        await asyncio.wait(pending)
    return loop.time() - start


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[rank]


def report(title: str, stats: Stats, wall: float, cpu: dict[str, float],
           calls: list[str]) -> dict[str, dict[str, float]]:
    rows = {}
    print(f"\n{title}")
    print(f"{'call':<14}{'requests':>9}{'rate/s':>9}{'p50 ms':>9}{'p90 ms':>9}"
          f"{'p99 ms':>9}{'max ms':>9}{'errors':>8}")
    names = [c for c in calls if c in stats.latencies or stats.errors.get(c)]
    everything: list[float] = []
    for call in names + ["all"]:
        values = everything if call == "all" else stats.latencies.get(call, [])
        errors = sum(stats.errors.values()) if call == "all" else stats.errors.get(call, 0)
        if call != "all":
            everything.extend(values)
        count = len(values) + errors
        row = {"requests": count, "rate": count / wall, "p50": percentile(values, 50),
               "p90": percentile(values, 90), "p99": percentile(values, 99),
               "max": max(values) if values else float("nan"), "errors": errors}
        rows[call] = row
        print(f"{call:<14}{count:>9}{row['rate']:>9.1f}{row['p50']:>9.1f}{row['p90']:>9.1f}"
              f"{row['p99']:>9.1f}{row['max']:>9.1f}{errors:>8}")
    served = rows["all"]["requests"] - rows["all"]["errors"]
    print(f"server CPU per request: {10 * cpu['server'] * wall / max(served, 1):.2f} ms")
    print(f"CPU (100% = one core, {cpu['cores']} cores): client {cpu['client']:.0f}%, "
          f"server {cpu['server']:.0f}%, postgres {cpu['postgres']:.0f}%, "
          f"everything else on the machine {cpu['other']:.0f}%")
    if cpu["other"] > 20:
        print("  warning: other processes competed for the CPU during this run")
    for call, sample in stats.samples.items():
        print(f"  first error of {call}: {sample}")
    return rows


async def run_phase(args: argparse.Namespace, server: Server, url: str, workload: Workload,
                    title: str) -> dict[str, dict[str, float]]:
    make = RawClient if args.client == "raw" else HttpxClient
    client = make("127.0.0.1", server.port, args.connections)
    conductor = Conductor(url, asyncio.get_running_loop(), workload)
    conductor.start()
    try:
        if args.warmup > 0:
            await drive(client, workload, args.rate, args.warmup, None)
        stats = Stats()
        meter = CpuMeter(server)
        meter.start()
        wall = await drive(client, workload, args.rate, args.seconds, stats)
        cpu = meter.stop()
    finally:
        await client.close()
        conductor.stop()
    rows = report(f"{title}: {args.rate:g} req/s offered for {args.seconds:g} s "
                  f"({args.server}, {args.workers} worker(s), {args.client} client"
                  + (f", {client.opened} connections)" if args.client == "raw" else ")"),
                  stats, wall, cpu, list(workload.calls))
    for failure in conductor.failures[:3]:
        print(f"  conductor failure: {failure}")
    return rows


# -- the most list and show serve, beside a bare FastAPI app ------------------------------

def fetch(port: int, path: str, headers: dict[str, str]) -> Any:
    import http.client
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path, headers=headers)
        answer = connection.getresponse()
        body = answer.read()
        if answer.status != 200:
            raise SystemExit(f"GET {path}: HTTP {answer.status}: {body[:200]!r}")
        return json.loads(body)
    finally:
        connection.close()


def capture(server: Server, envs: list[Env]) -> dict[str, Any]:
    """The calls the closed-loop runs make (one tenant's list, the show of one
    of its deployed environments) and the API's answers to them."""
    env = next((e for e in envs if e.state == "deployed"), envs[0])
    headers = Workload.headers(env.tenant)
    calls = {"list": "/environments", "show": f"/environments/{env.id}"}
    return {"headers": headers, "paths": calls,
            "answers": {call: fetch(server.port, path, headers) for call, path in calls.items()}}


def wrk(port: int, path: str, headers: dict[str, str], connections: int,
        seconds: float) -> tuple[float, int]:
    """(requests/s, failed requests) of a ``wrk`` run (one thread)."""
    command = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s"]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    out = subprocess.run(command + [f"http://127.0.0.1:{port}{path}"], capture_output=True,
                         text=True, timeout=seconds + 60, check=True).stdout
    rate = re.search(r"Requests/sec:\s*([\d.]+)", out)
    if rate is None:
        raise SystemExit(f"wrk said:\n{out}")
    failed = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses:\s*(\d+)", out))
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), "
                       r"timeout (\d+)", out)
    if errors:
        failed += sum(int(n) for n in errors.groups())
        print(f"  wrk {path}: {errors.group(0)}")   # timeouts: a reply over wrk's 2 s
    return float(rate.group(1)), failed


async def closed_loop(port: int, path: str, headers: dict[str, str], connections: int,
                      seconds: float) -> tuple[float, int]:
    """What :func:`wrk` measures, with the built-in client (wrk absent)."""
    client = RawClient("127.0.0.1", port, connections)
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    counts = [0, 0]

    async def worker() -> None:
        while loop.time() < end:
            try:
                status, _ = await client.request("GET", path, headers)
            except Exception:  # noqa: BLE001 -- counted
                status = 0
            counts[status != 200] += 1
    began = loop.time()
    await asyncio.gather(*(worker() for _ in range(connections)))
    wall = loop.time() - began
    await client.close()
    return counts[0] / wall, counts[1]


def most(args: argparse.Namespace, port: int, path: str,
         headers: dict[str, str]) -> tuple[float, int]:
    if shutil.which("wrk") and args.wrk_client == "wrk":
        return wrk(port, path, headers, args.wrk_connections, args.wrk_seconds)
    return asyncio.run(closed_loop(port, path, headers, args.wrk_connections,
                                   args.wrk_seconds))


def server_cpu(server: Server) -> float:
    return sum(proc_cpu(p) for p in server.pids())


def against_bare(args: argparse.Namespace, server: Server, bare: Server,
                 calls: dict[str, Any], floor: Server | None = None) -> dict[str, float]:
    """Each call's requests/s on the API and on the bare app (and ``floor``,
    the bare app with the call's one query: :func:`bare_db_app`),
    ``--wrk-rounds`` times interleaved (the order reversed every other
    round); the medians and their ratios to the bare app are printed, with
    each server's CPU per request (a busy machine lowers the rates, hardly
    the CPU a request costs: the ratio of those is the one the rates would
    have on one idle core).  Returns ``{call: ratio}`` of the API's rates."""
    client = "wrk" if shutil.which("wrk") and args.wrk_client == "wrk" else "built-in client"
    servers = [("api", server), ("bare", bare)] + ([("bare+db", floor)] if floor else [])
    rates: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    cpu: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    failed: collections.Counter = collections.Counter()
    for round_ in range(args.wrk_rounds):
        for call in ("list", "show"):
            for name, target in servers if round_ % 2 == 0 else servers[::-1]:
                before, began = server_cpu(target), time.monotonic()
                rate, errors = most(args, target.port, calls["paths"][call], calls["headers"])
                served = rate * (time.monotonic() - began)
                rates[call, name].append(rate)
                cpu[call, name].append(1000 * (server_cpu(target) - before) / max(served, 1))
                failed[call, name] += errors
    print(f"\nMOST REQUESTS/S ({client}, {args.wrk_connections} connections, "
          f"{args.wrk_seconds:g} s x {args.wrk_rounds} rounds, interleaved; medians; "
          f"ratio: to the bare app's)")
    print(f"{'call':<6}{'server':>9}{'req/s':>8}{'ratio':>7}{'CPU/req':>10}{'ratio':>7}"
          f"   rounds (req/s)")
    ratios = {}
    for call in ("list", "show"):
        plain = statistics.median(rates[call, "bare"])
        plain_cpu = statistics.median(cpu[call, "bare"])
        for name, _ in servers:
            rate, each_cpu = statistics.median(rates[call, name]), statistics.median(cpu[call, name])
            errors = failed[call, name]
            ratio = rate / plain if plain and not errors else 0.0
            if name == "api":
                ratios[call] = ratio
            print(f"{call:<6}{name:>9}{rate:>8.0f}{ratio:>7.2f}{each_cpu:>8.2f}ms"
                  f"{plain_cpu / each_cpu if each_cpu else 0:>7.2f}   "
                  + ", ".join(f"{r:.0f}" for r in rates[call, name])
                  + (f"  ({errors} failed)" if errors else ""))
    print("(CPU/req: the server process's CPU time per request served; its ratio, bare's "
          "over this one's, is what the rates' would be with a core to each server; "
          "bare+db: the bare app plus the call's one query, the floor of FastAPI + "
          "SQLAlchemy + psycopg for it)")
    return ratios


MIXED = {"list": 25, "show": 45, "configure": 10, "post service": 10, "deploy": 10}
READ = {"list": 50, "show": 50}


def verdict_ratio(ratios: dict[str, float]) -> bool:
    ok = all(ratios.get(call, 0.0) >= TARGET_RATIO for call in TARGET_CALLS)
    print(f"\nVERDICT: {'PASS' if ok else 'FAIL'}: target at least {TARGET_RATIO:g} of the "
          f"bare app's requests/s for show and list -- "
          + ", ".join(f"{call} {ratios.get(call, 0.0):.2f}" for call in TARGET_CALLS))
    return ok


def verdict(rows: dict[str, dict[str, float]], rate: float) -> bool:
    parts, ok = [], True
    for call in TARGET_CALLS:
        row = rows.get(call)
        if row is None:
            return False
        good = row["p99"] < TARGET_P99_MS and row["errors"] == 0
        ok &= good
        errors = f" and {row['errors']} errors" if row["errors"] else ""
        parts.append(f"{call} p99 {row['p99']:.1f} ms{errors}")
    achieved = rows["all"]["rate"]
    reached = achieved >= 0.95 * rate
    ok &= reached
    print(f"\nVERDICT: {'PASS' if ok else 'FAIL'}: target p99 < {TARGET_P99_MS:g} ms at "
          f"{rate:g} req/s for show and list -- {', '.join(parts)}, "
          f"{achieved:.1f} req/s achieved")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=300, help="offered requests/s (300)")
    parser.add_argument("--seconds", type=float, default=20, help="length of each run (20)")
    parser.add_argument("--warmup", type=float, default=3, help="uncounted warm-up, s (3)")
    parser.add_argument("--envs", type=int, default=1000, help="environments seeded (1000)")
    parser.add_argument("--tenants", type=int, default=5, help="tenants they belong to (5)")
    parser.add_argument("--runs", default="mixed,read,wrk",
                        help="mixed,read,wrk (all three)")
    parser.add_argument("--wrk-seconds", type=float, default=5,
                        help="length of each closed-loop run (5)")
    parser.add_argument("--wrk-rounds", type=int, default=3,
                        help="closed-loop runs of each call on each server (3)")
    parser.add_argument("--wrk-connections", type=int, default=16,
                        help="connections of the closed-loop runs (16)")
    parser.add_argument("--wrk-client", choices=("wrk", "builtin"), default="wrk",
                        help="closed-loop client (wrk; the built-in one when wrk is absent)")
    parser.add_argument("--read-mix", default="list=50,show=50", metavar="CALL=W,...",
                        help="weights of the read run (list=50,show=50)")
    parser.add_argument("--server", choices=("fornace", "uvicorn"), default="fornace",
                        help="fornace: the `fornace api` command (default); uvicorn: "
                             "python -m uvicorn on server_app, see --workers")
    parser.add_argument("--workers", type=int, default=1,
                        help="worker processes (`fornace api --workers N`, or uvicorn's); "
                             "above 1 the server's broker is --broker")
    parser.add_argument("--broker", default="amqp://guest:guest@127.0.0.1:5672//",
                        help="the server's broker with --workers above 1 (worker processes "
                             "cannot share the in-process one)")
    parser.add_argument("--no-access-log", action="store_true",
                        help="uvicorn without its access log (--server uvicorn only)")
    parser.add_argument("--client", choices=("raw", "httpx"), default="raw")
    parser.add_argument("--connections", type=int, default=64,
                        help="most connections the client opens (64)")
    parser.add_argument("--port", type=int, default=0, help="server port (a free one)")
    parser.add_argument("--db-name", default="fornace_bench")
    parser.add_argument("--admin-url", default=ADMIN_URL,
                        help="URL of a database to run CREATE/DROP DATABASE from")
    parser.add_argument("--keep", action="store_true", help="do not drop the database")
    parser.add_argument("--py-spy", metavar="OUT", help="record the server with py-spy")
    parser.add_argument("--py-spy-gil", action="store_true",
                        help="with --py-spy: only samples holding the GIL, idle ones "
                             "included (py-spy's --gil --idle)")
    parser.add_argument("--server-path", metavar="DIR", action="append", default=[],
                        help="prepend DIR to the server's PYTHONPATH, e.g. a "
                             "`pip install --target DIR httptools uvloop` to try them "
                             "without installing them")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.server == "fornace" and args.no_access_log:
        parser.error("--no-access-log needs --server uvicorn")

    import logging
    logging.basicConfig(level=logging.WARNING)
    from fornace.common.db.engine import upgrade

    url = db_url(args.db_name, args.admin_url)
    recreate_database(args.db_name, args.admin_url)
    server = bare = None
    ok = True
    try:
        upgrade(url)
        began = time.monotonic()
        envs = seed(url, args.envs, args.tenants)
        analyze(url)
        kinds = collections.Counter(e.state for e in envs)
        print(f"seeded {len(envs)} environments over {args.tenants} tenants in "
              f"{time.monotonic() - began:.1f} s: "
              + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
        server = start_server(args, url)
        print(f"server: {args.server} ({server.stack}), pid {server.process.pid}, "
              f"port {server.port}, log {server.log}")
        rng = random.Random(args.seed)
        runs = [r.strip() for r in args.runs.split(",") if r.strip()]
        for run in runs:
            if run == "mixed":
                asyncio.run(run_phase(args, server, url, Workload(envs, args.tenants, MIXED, rng),
                                      "MIXED (list, show, configure, post service, deploy)"))
            elif run == "read":
                mix = {k.strip(): float(w) for k, w in
                       (part.split("=") for part in args.read_mix.split(","))}
                if not set(mix) <= set(READ):
                    parser.error("--read-mix takes list and show")
                rows = asyncio.run(run_phase(args, server, url,
                                             Workload(envs, args.tenants, mix, rng),
                                             "READ (show + list only)"))
                ok &= verdict(rows, args.rate)
            elif run == "wrk":
                calls = capture(server, envs)
                args.payloads = server.workdir / "payloads.json"
                args.payloads.write_text(json.dumps(calls["answers"]))
                bare = start_server(argparse.Namespace(**{**vars(args), "server": "bare",
                                                          "workers": 1, "port": 0}), url)
                print(f"bare app: {bare.stack}, pid {bare.process.pid}, port {bare.port}")
                floor = start_server(argparse.Namespace(**{**vars(args), "server": "bare-db",
                                                           "workers": 1, "port": 0}), url)
                try:
                    ok &= verdict_ratio(against_bare(args, server, bare, calls, floor))
                finally:
                    stop_server(floor)
                    shutil.rmtree(floor.workdir, ignore_errors=True)
            else:
                parser.error(f"unknown run {run!r}")
    finally:
        if bare is not None:
            stop_server(bare)
            shutil.rmtree(bare.workdir, ignore_errors=True)
        if server is not None:
            stop_server(server)
            if args.py_spy:
                print(f"py-spy profile: {args.py_spy}")
            shutil.rmtree(server.workdir, ignore_errors=True)
        if args.keep:
            print(f"database kept: {url}")
        else:
            drop_database(args.db_name, args.admin_url)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
