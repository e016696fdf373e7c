#!/usr/bin/env python3
"""Do more conductors deploy more environments per second?  (not a test)

The whole user path on RabbitMQ + PostgreSQL, for 1, 2 and 4 conductor
processes (``--conductors 1,2,4``).  Each run gets a fresh RabbitMQ vhost
(``rabbitmqctl add_vhost`` + ``set_permissions``) and a fresh PostgreSQL
database (created and dropped against the ``postgres`` database), one
``fornace api`` process and N ``fornace conductor --stacks simulator --agents
simulator`` processes sharing one config file ([broker] url, [database]
connection, [conductor] max_environments when ``--max-environments`` is
given).

K environments (``--environments``, 100) of one ``linuxWebServer`` service of
U units (``--units``, 4; tools/bench_plan.py's shape) are prepared through the
REST API -- environment created, configuration session opened, the service
posted -- untimed; then every session is deployed at once
(``POST /environments/{id}/sessions/{session}/deploy`` from ``--clients``
threads), timed from the first deploy request to the last environment
reaching a final state, as one ``GET /environments`` polled every
``--poll`` seconds shows it (``ready``: succeeded; any other state that is not
``deploying``/``deleting``: failed; only a listing asked for after the
environment's deploy request was answered counts).

The API consumes the conductors' reports, job events and results from
RabbitMQ, and an environment shows ``ready`` as soon as its result is stored:
reports and job events may still be queued then.  So the benchmark then waits
for the queues the API consumes to be empty (passive declares on the run's
vhost, every 50 ms) and takes the CPU figures there -- all the work the
deployments caused.

Printed per conductor count: deployments/s and wall seconds (to the last
final state), succeeded/failed, when the API's queues were empty and the last
deploy request answered; CPU seconds (utime + stime of /proc/PID/stat, with
descendants, read before the processes stop) of the API and of all conductors
together from the first deploy to the queues' emptying, per deployment, and
the same up to the last final state; CPU ms per deployment of each part (the
API's without this benchmark's own polling -- its listings counted, each
priced by listings measured idle before the run --, the conductors',
RabbitMQ's, PostgreSQL's backends of the run's database); the whole machine's busy cores over the
same span (/proc/stat) beside the load seen in the second before the deploys
(someone else's), the CPU of the other busiest commands (RabbitMQ's beam.smp,
postgres, ...) and of this client; the reports and tasks one deployment
stored; the peak RSS (VmHWM) of the API and of the largest conductor.  Then
the speed-up of every count against 1 conductor (the median run of each count
with ``--repeat``) and the target "2 conductors >= 1.7 x one".
``os.cpu_count()`` is printed too: when the cores are the limit, the machine
is busy and CPU seconds per deployment stay flat (or grow) while
deployments/s stop growing.  ``--wait-quiet SECONDS`` waits for a shared
machine's other load to drop before each timed phase; ``--api-workers`` runs
``fornace api --workers N``.

The projection (printed last, also with ``--project-cores`` etc.): how many
deployments/s a machine of C cores (4, 8, 16) would sustain with N conductors
and M API workers (``fornace api --workers M``: processes sharing the port,
each consuming the conductors' messages), and which part limits it.  Its
input is the CPU seconds one deployment cost each part in the measured run
(the median run of the largest conductor count measured): ``a`` the API (all
its workers), ``c`` the conductors together, ``r`` RabbitMQ (the whole
beam.smp: other vhosts' traffic on a shared machine counts too, so ``r`` is
an upper bound), ``p`` PostgreSQL (only the backends connected to this run's
database; the server's WAL writer and checkpointer left out).  The model:

- a Python process runs its Python code on one core at a time (the GIL):
  M API workers sustain at most M / a deployments/s, N conductors N / c --
  the work spreading evenly (RabbitMQ hands tasks round-robin to the
  conductors' consumers, uvicorn's workers share the listening socket);
- RabbitMQ (one Erlang scheduler per core, one Erlang process per queue)
  uses at most min(C, RABBIT_CORES) cores -- a deployment's messages cross a
  handful of busy queues --: min(C, 4) / r;
- PostgreSQL (one backend process per connection, WAL and lock contention
  beyond) uses at most min(C, POSTGRES_CORES) cores: min(C, 8) / p;
- everything shares the C cores: C / (a + c + r + p) (the load generator,
  this script, is not counted: in production the clients are elsewhere);
- the sustained rate is the lowest of these ceilings, and the part that sets
  it is named.  The costs per deployment are taken as they were measured, the
  same whatever N and M (what a conductor or an API worker more must not
  change); contention that grows with them is not modelled.

``--profile DIR`` also runs ``py-spy record -f raw`` on the API and every
conductor during the timed phase (DIR/c<N>-api-<mode>.txt,
DIR/c<N>-conductor<i>-<mode>.txt) and prints each process's top functions
(own samples, and Fornace's functions with their callees).  ``--profile-mode
gil`` (the default) samples only the thread holding the GIL -- where the
Python CPU goes, and the share of the time the GIL was held (near 100 %: that
process is saturated) --; ``active`` samples every thread not idle, waits on
sockets and the database included.  The sampler takes CPU of its own, so
profiled runs are slower: compare figures of runs without it.

    python tools/bench_scaleout.py --environments 10 --conductors 1,2
    python tools/bench_scaleout.py                          # 100 x 4 units, 1,2,4
    python tools/bench_scaleout.py --profile /tmp/scaleout-prof --conductors 1,2

Everything a run creates (processes, vhost, database, temporary folder unless
``--keep``) is removed at its end, also on an error, Ctrl-C or SIGTERM.  Exit
code 0 when every deployment of every run succeeded, 1 otherwise.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_plan import add_backend_options, fornace, peak_rss_mb  # noqa: E402  (measured alike)
from ports import free_port  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
BUSY = ("deploying", "deleting")
START_TIMEOUT = 90.0       # s for the API to answer and the conductors to consume
PROGRESS_EVERY = 2.0       # s between progress lines on stderr
STOP_WAIT = 20.0           # s for a terminated process to exit before it is killed
QUIET = 0.25              # cores busy (others) under which --wait-quiet starts a run
TARGET = 1.7               # 2 conductors >= TARGET x one where cores are free
TARGET_BUSY = 0.95         # 2 conductors >= TARGET_BUSY x one on a 2-core machine
RABBIT_CORES = 4           # the cores RabbitMQ can use for a deployment's few busy queues
POSTGRES_CORES = 8         # the cores PostgreSQL's backends use before contention rules


def progress(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


def service(units: int) -> dict[str, Any]:
    """One static-site service of ``units`` units (tools/bench_plan.py's shape)."""
    return {"id": "web00001", "name": "site", "type": "linuxWebServer",
            "osImage": {"name": "debian-12", "type": "linux"}, "flavor": "m1.small",
            "unitNamingPattern": "web#", "port": 8080,
            "units": [{"id": f"unit{n:05d}", "name": f"site_instance_{n}"}
                      for n in range(units)]}




# ------------------------------------------------------------ /proc figures

def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            tree[ppid].append(int(entry))
    return tree


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process and its live descendants (0 when gone).

    Children are counted in case ``fornace api`` ever runs workers; a
    ``--workers 1`` API and the conductors are single processes.
    """
    tree, total, todo = _children(), 0, [pid]
    while todo:
        current = todo.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])   # utime, stime (fields 14, 15)
        todo.extend(tree.get(current, ()))
    return total / CLOCK_TICKS


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot (/proc/stat's cpu line)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]   # idle, iowait
    return sum(values) - idle, sum(values)


def cpu_by_pid() -> dict[int, tuple[str, float, int]]:
    """pid -> (command name, CPU seconds, start time) of every process of the machine."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            head, _, tail = stat.rpartition(")")
            fields = tail.split()
            found[int(entry)] = (head.split("(", 1)[1],
                                 (int(fields[11]) + int(fields[12])) / CLOCK_TICKS,
                                 int(fields[19]))
    return found


def cpu_by_command(before: dict[int, tuple[str, float, int]],
                   after: dict[int, tuple[str, float, int]],
                   skip: set[int]) -> collections.Counter[str]:
    """CPU seconds spent between two snapshots, per command name, ``skip`` pids left out
    (processes that ended in between are not seen; those born in between count whole;
    kernel workers, whose names change with their work, count as one "kworker")."""
    spent: collections.Counter[str] = collections.Counter()
    for pid, (name, seconds, started) in after.items():
        if pid in skip:
            continue
        earlier = before.get(pid)
        if earlier is not None and earlier[2] == started:   # the same process (no pid reuse)
            seconds -= earlier[1]
        spent["kworker" if name.startswith("kworker/") else name] += seconds
    return spent


def backends_cpu(database: str) -> dict[int, tuple[float, int]]:
    """pid -> (CPU seconds, start time) of the PostgreSQL backends connected to
    ``database`` (their command line names it: "postgres: USER DB HOST(PORT) ...").

    Why: the machine's other PostgreSQL clients (other benchmarks, tests) run
    on the same server; only these backends did this run's work.  The
    server's shared processes (WAL writer, checkpointer) are left out.
    """
    found = {}
    marker = f" {database} ".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if marker not in Path(f"/proc/{entry}/cmdline").read_bytes():
                continue
            fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        found[int(entry)] = ((int(fields[11]) + int(fields[12])) / CLOCK_TICKS, int(fields[19]))
    return found


def backends_spent(before: dict[int, tuple[float, int]],
                   after: dict[int, tuple[float, int]]) -> float:
    """CPU seconds the backends spent between two :func:`backends_cpu` snapshots."""
    spent = 0.0
    for pid, (seconds, started) in after.items():
        earlier = before.get(pid)
        spent += seconds - (earlier[0] if earlier and earlier[1] == started else 0.0)
    return spent


def background_load(seconds: float = 1.0) -> float:
    """Cores busy on the machine over ``seconds`` (our processes idle: someone else's load)."""
    busy, total = machine_jiffies()
    time.sleep(seconds)
    busy2, total2 = machine_jiffies()
    return (busy2 - busy) / max(total2 - total, 1) * (os.cpu_count() or 1)


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def tree_peak_rss_mb(pid: int) -> float:
    """The largest VmHWM of a process and its descendants (``fornace api --workers``)."""
    tree, found, todo = _children(), 0.0, [pid]
    while todo:
        current = todo.pop()
        found = max(found, peak_rss_mb(current))
        todo.extend(tree.get(current, ()))
    return found




# ------------------------------------------------------------ the REST API

class ApiError(Exception):
    pass


class Api:
    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None, timeout: float = 120) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json",
                                                  **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                text = answer.read()
        except urllib.error.HTTPError as exc:
            raise ApiError(f"{method} {path}: {exc.code} "
                           f"{exc.read()[:500].decode(errors='replace')}") from None
        return json.loads(text) if text else None


# ------------------------------------------------------------ vhost, database

def run_checked(command: list[str], what: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return done.stdout


class Vhost:
    def __init__(self, name: str, user: str) -> None:
        self.name, self.user, self.made = name, user, False

    def create(self) -> None:
        run_checked(["rabbitmqctl", "-q", "add_vhost", self.name], "rabbitmqctl add_vhost")
        self.made = True
        run_checked(["rabbitmqctl", "-q", "set_permissions", "-p", self.name, self.user,
                     ".*", ".*", ".*"], "rabbitmqctl set_permissions")

    def delete(self) -> None:
        if self.made:
            run_checked(["rabbitmqctl", "-q", "delete_vhost", self.name],
                        "rabbitmqctl delete_vhost")
            self.made = False


class Backlog:
    """Messages waiting in the queues the API consumes (passive declares, one connection).

    Why: an environment shows ``ready`` once its result is stored, while its
    reports and job events may still wait for the API; the work a deployment
    causes ends when those queues are empty.  Ready messages only (a passive
    declare does not count the few a consumer holds unacknowledged).
    """

    QUEUES = ("task-results", "task-reports", "job-events", "tasks")

    def __init__(self, url: str) -> None:
        import kombu   # the product's dependency; imported here, used only here
        self.connection = kombu.Connection(url, heartbeat=0)
        self.channel = self.connection.channel()

    def count(self) -> dict[str, int]:
        found = {}
        for name in self.QUEUES:
            try:
                found[name] = self.channel.queue_declare(queue=name, passive=True).message_count
            except Exception:  # noqa: BLE001 -- absent queue: the channel is closed
                self.channel = self.connection.channel()
        return found

    def close(self) -> None:
        try:
            self.connection.release()
        except Exception:  # noqa: BLE001
            pass


class Database:
    def __init__(self, name: str, host: str, port: int, user: str) -> None:
        self.name, self.host, self.port, self.user, self.made = name, host, port, user, False

    def _psql(self, sql: str) -> None:
        run_checked(["psql", "-h", self.host, "-p", str(self.port), "-U", self.user,
                     "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-qAtc", sql], f"psql {sql!r}")

    def create(self) -> None:
        self._psql(f'CREATE DATABASE "{self.name}"')
        self.made = True

    def drop(self) -> None:
        if self.made:
            self._psql(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            self.made = False

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{self.user}@{self.host}:{self.port}/{self.name}"


# ------------------------------------------------------------ processes

@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError as exc:
            return f"(no log: {exc})"

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            raise RuntimeError(f"fornace {self.name} (pid {self.popen.pid}) exited early with "
                               f"code {self.popen.returncode}; the end of its log "
                               f"({self.log}, kept with --keep):\n"
                               f"{self.tail()}")


@dataclass
class Run:
    """One API and N conductors on their own vhost and database."""

    conductors: int
    args: argparse.Namespace
    workdir: Path = field(init=False)
    vhost: Vhost = field(init=False)
    database: Database = field(init=False)
    api: Process | None = None
    broker: str = ""
    workers: list[Process] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        tag = f"scaleout_{os.getpid()}_{self.conductors}_{uuid.uuid4().hex[:6]}"
        self.workdir = Path(tempfile.mkdtemp(prefix=f"fornace-{tag}-"))
        self.vhost = Vhost(f"fornace-{tag}", self.args.amqp_user)
        self.database = Database(f"fornace_{tag}", self.args.pg_host, self.args.pg_port,
                                 self.args.pg_user)

    @property
    def processes(self) -> list[Process]:
        return ([self.api] if self.api else []) + self.workers

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        args = self.args
        self.vhost.create()
        self.database.create()
        broker = self.broker = (f"amqp://{args.amqp_user}:{args.amqp_password}@{args.amqp_host}:"
                  f"{args.amqp_port}/{urllib.parse.quote(self.vhost.name, safe='')}")
        limit = max(args.units, 100)
        conf = self.workdir / "fornace.conf"
        conf.write_text(
            f"[DEFAULT]\ndebug = false\n"
            f"[broker]\nurl = {broker}\n"
            f"[rabbitmq]\nhost = {args.amqp_host}\nport = {args.amqp_port}\n"
            f"login = {args.amqp_user}\npassword = {args.amqp_password}\n"
            f"virtual_host = {self.vhost.name}\n"
            f"[database]\nconnection = {self.database.url}\n"
            f"[api]\nstate_dir = {self.workdir / 'state'}\n"
            f"max_units_per_service = {limit}\nmax_units_per_environment = {limit}\n"
            + (f"[conductor]\nmax_environments = {args.max_environments}\n"
               if args.max_environments else ""))
        self.port = free_port()
        self.api = self._spawn("api", "--config-file", str(conf), "api", "--host", "127.0.0.1",
                               "--port", str(self.port), "--workers", str(args.api_workers))
        self._wait_api()   # the API upgrades the schema; conductors start on a ready one
        for number in range(self.conductors):
            self.workers.append(self._spawn(f"conductor{number}", "--config-file", str(conf),
                                            "conductor", "--stacks", "simulator",
                                            "--agents", "simulator"))
        self._wait_conductors()

    def _spawn(self, name: str, *argv: str) -> Process:
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as out:
            popen = subprocess.Popen(fornace(*argv), cwd=ROOT, stdout=out,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)   # Ctrl-C reaches only us
        return Process(name, popen, log)

    def all_pids(self) -> set[int]:
        """The pids of our processes and of their descendants (API workers)."""
        tree, found, todo = _children(), set(), [p.popen.pid for p in self.processes]
        while todo:
            current = todo.pop()
            found.add(current)
            todo.extend(tree.get(current, ()))
        return found

    def check_alive(self) -> None:
        for process in self.processes:
            process.check_alive()

    def _wait_api(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                Api(self.url).call("GET", "/environments", timeout=5)
                return
            except (OSError, ApiError):
                time.sleep(0.1)
        raise RuntimeError(f"the API did not answer within {START_TIMEOUT:.0f} s; the end of "
                           f"its log:\n{self.api.tail() if self.api else ''}")

    def _wait_conductors(self) -> None:
        """Until every conductor has said it consumes (its log's 'consumer(s) on' line).

        Why: tasks published before a conductor consumes would wait for its
        start-up, which is not the deployment's price.  The config file sets no
        log file, so the line is in the log this benchmark keeps.
        """
        deadline, said = time.monotonic() + START_TIMEOUT, set()
        while time.monotonic() < deadline:
            self.check_alive()
            for process in self.workers:
                if "consumer(s) on" in process.tail(100_000):
                    said.add(process.name)
            if len(said) == len(self.workers):
                return
            time.sleep(0.2)
        raise RuntimeError(f"conductors {sorted({p.name for p in self.workers} - said)} did not "
                           f"say they consume within {START_TIMEOUT:.0f} s; the end of the "
                           f"first one's log:\n"
                           f"{next(p for p in self.workers if p.name not in said).tail()}")

    def stop(self) -> None:
        """Terminate every process (conductors first), kill what does not exit."""
        for process in reversed(self.processes):
            if process.popen.poll() is None:
                try:
                    os.killpg(process.popen.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + STOP_WAIT
        for process in reversed(self.processes):
            try:
                process.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                progress(f"{process.name} (pid {process.popen.pid}) did not stop in "
                         f"{STOP_WAIT:.0f} s: killed")
                try:
                    os.killpg(process.popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.popen.wait()

    def cleanup(self) -> None:
        """Processes, database, vhost, folder: each tried even when another fails.

        Ctrl-C and SIGTERM are ignored meanwhile, so a second one cannot leave
        half of it undone.
        """
        handlers = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT,
                                                                         signal.SIGTERM)}
        try:
            self._cleanup()
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)

    def _cleanup(self) -> None:
        problems = []
        for step in (self.stop, self.database.drop, self.vhost.delete):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 -- report, go on cleaning
                problems.append(f"{step.__qualname__}: {exc}")
        if self.args.keep:
            progress(f"kept {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)
        for problem in problems:
            progress(f"clean-up: {problem}")


# ------------------------------------------------------------ profiling

class Profiler:
    """``py-spy record -f raw`` on some processes, stopped with SIGINT.

    ``gil`` mode (``--gil``) keeps only the samples of the thread holding the
    GIL: where a process's Python CPU goes, and -- samples / (rate x seconds)
    -- how much of the time its GIL was held (near 100 %: that process is
    saturated, more threads in it cannot help).  ``active`` mode keeps every
    thread that is not idle, waits in C calls (sockets, the database) included.
    """

    RATE = 100   # samples per second (``--profile-rate``)

    def __init__(self, directory: Path, prefix: str, targets: list[Process],
                 mode: str, api_workers: int, rate: int = RATE) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.files: dict[str, Path] = {}
        self.spies: list[subprocess.Popen] = []
        self.mode = mode
        self.seconds = 0.0
        spy = Path(sys.executable).with_name("py-spy")
        for process in targets:
            out = directory / f"{prefix}-{process.name}-{mode}.txt"
            self.files[process.name] = out
            self.spies.append(subprocess.Popen(
                [str(spy), "record", "-f", "raw", "-F", "-r", str(rate), "-o", str(out),
                 "--pid", str(process.popen.pid), "--nonblocking",
                 *(["--subprocesses"] if process.name == "api" and api_workers > 1 else []),
                 *(["--gil"] if mode == "gil" else [])],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        time.sleep(1.0)   # the sampler attaches

    def stop(self) -> None:
        for spy in self.spies:
            if spy.poll() is None:
                spy.send_signal(signal.SIGINT)
        for spy in self.spies:
            try:
                spy.wait(timeout=30)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()

    def report(self, top: int) -> None:
        for name, path in self.files.items():
            own: collections.Counter[str] = collections.Counter()
            inclusive: collections.Counter[str] = collections.Counter()
            total = 0
            try:
                lines = path.read_text().splitlines()
            except OSError:
                print(f"  {name}: no profile ({path} missing)")
                continue
            entries: collections.Counter[str] = collections.Counter()
            for line in lines:
                stack, _, count = line.rpartition(" ")
                if not stack or not count.isdigit():
                    continue
                frames = [_frame(f) for f in stack.split(";")]
                total += int(count)
                own[frames[-1]] += int(count)
                entries[_entry(frames)] += int(count)
                for frame in set(frames):
                    inclusive[frame] += int(count)
            if not total:
                print(f"  {name}: no samples")
                continue
            held = (f", GIL held {100 * total / (self.RATE * self.seconds):.0f} % of the "
                    f"{self.seconds:.1f} s to the queues' emptying"
                    if self.mode == "gil" and self.seconds else "")
            print(f"  {name}: {total} samples{held} ({path})")
            if self.seconds:
                print(f"    by thread (entry point), % of the {self.seconds:.1f} s "
                      f"({'holding the GIL' if self.mode == 'gil' else 'not idle'}):")
                for entry, count in entries.most_common(5):
                    print(f"      {100 * count / (self.RATE * self.seconds):5.1f}%  {entry}")
            print("    own time:")
            for frame, count in own.most_common(top):
                print(f"      {100 * count / total:5.1f}%  {frame}")
            print("    with callees (Fornace's code):")
            shown = [(f, c) for f, c in inclusive.most_common()
                     if f.split(" (", 1)[-1].startswith(PROJECT_DIRS)][:top]
            for frame, count in shown:
                print(f"      {100 * count / total:5.1f}%  {frame}")


PROJECT_DIRS = ("api/", "conductor/", "common/", "cli/", "agent/")


def _entry(frames: list[str]) -> str:
    """The first frame of a stack below the threading and process frames: what the
    thread runs (``Consumer.run``, ``_worker``, the main module...)."""
    for frame in frames:
        if not (frame.startswith("process ") or "(threading.py" in frame):
            return frame
    return frames[-1]


def _frame(text: str) -> str:
    """'func (path/to/file.py:12)' -> 'func (file.py:12)', shorter paths for reading."""
    name, _, where = text.partition(" (")
    where = where.rstrip(")")
    for marker in ("/site-packages/", "/work/main/", "/lib/python3"):
        if marker in where:
            where = where.split(marker, 1)[1]
            break
    return f"{name} ({where})" if where else name


# ------------------------------------------------------------ one run

@dataclass
class Figures:
    conductors: int
    environments: int
    wall: float = 0.0
    succeeded: int = 0
    failed: int = 0
    api_cpu: float = 0.0
    conductors_cpu: float = 0.0
    background: float = 0.0        # cores busy in the second before the deploys (others)
    drained: float = 0.0           # s from the first deploy to the API's queues empty
    api_cpu_final: float = 0.0     # CPU s up to the last final state (not drained)
    conductors_cpu_final: float = 0.0
    machine_busy: float = 0.0      # cores busy on the whole machine (DB, broker, bench too)
    bench_cpu: float = 0.0         # CPU s of this process (client threads, polling)
    deploys_answered: float = 0.0  # s from the first deploy request to the last one answered
    others: collections.Counter[str] = field(default_factory=collections.Counter)
    postgres_cpu: float = 0.0      # CPU s of the PostgreSQL backends of this run's database
    api_workers_measured: int = 1  # fornace api --workers of the run
    listings: int = 0              # GET /environments of the timed phase (this benchmark's)
    listing_cpu: float = 0.0       # the API's CPU s per listing, measured idle before
    reports: int = 0               # reports and tasks of one deployment (the first one)
    tasks: int = 0
    api_rss: float = 0.0
    conductor_rss: float = 0.0
    failures: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.environments / self.wall if self.wall else 0.0

    @property
    def polling_cpu(self) -> float:
        """The API's CPU s spent on this benchmark's listings (an estimate)."""
        return self.listings * self.listing_cpu

    def per_deployment(self) -> dict[str, float]:
        """CPU seconds per deployment of each part (the projection's input)."""
        count = max(self.succeeded + self.failed, 1)
        return {"api": max(self.api_cpu - self.polling_cpu, 0.0) / count, "conductors": self.conductors_cpu / count,
                "rabbitmq": self.others.get("beam.smp", 0.0) / count,
                "postgresql": self.postgres_cpu / count}


def prepare(api: Api, count: int, units: int, clients: int) -> list[tuple[str, str]]:
    """K environments each with a session holding the service: (env id, session id)."""
    body = service(units)

    def one(number: int) -> tuple[str, str]:
        env = api.call("POST", "/environments", {"name": f"scaleout-{number:04d}"})
        session = api.call("POST", f"/environments/{env['id']}/configure")
        api.call("POST", f"/environments/{env['id']}/services", body,
                 {"X-Configuration-Session": session["id"]})
        return env["id"], session["id"]

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        return list(pool.map(one, range(count)))


def listing_cpu(run: Run, times: int = 20) -> float:
    """The API's CPU seconds for one ``GET /environments`` of the prepared
    environments (the mean of ``times``, everything idle).

    Why: the timed phase lists the environments every ``--poll`` seconds to
    see them end; that is this benchmark's load, not the deployments', and it
    grows with the run's wall time -- a slower run would look dearer per
    deployment.  Its estimate is taken off the API's CPU per deployment.
    """
    api, pid = Api(run.url), run.api.popen.pid
    api.call("GET", "/environments")
    before = cpu_seconds(pid)
    for _ in range(times):
        api.call("GET", "/environments")
    return (cpu_seconds(pid) - before) / times


def deploy_all(run: Run, prepared: list[tuple[str, str]], args: argparse.Namespace,
               figures: Figures) -> None:
    """Deploy every session at once; wait until every environment is final."""
    api = Api(run.url)
    answered: dict[str, float] = {}     # env id -> monotonic time its deploy was answered
    refused: dict[str, str] = {}        # env id -> why its deploy request failed
    lock = threading.Lock()

    def deploy(env_id: str, session_id: str) -> None:
        try:
            api.call("POST", f"/environments/{env_id}/sessions/{session_id}/deploy")
            with lock:
                answered[env_id] = time.monotonic()
        except Exception as exc:  # noqa: BLE001 -- a refused deploy is a failed one
            with lock:
                refused[env_id] = str(exc)

    final: dict[str, str] = {}
    cpu_before = ([cpu_seconds(run.api.popen.pid)] +
                  [cpu_seconds(p.popen.pid) for p in run.workers])
    machine_before, bench_before, everyone_before = machine_jiffies(), own_cpu(), cpu_by_pid()
    backends_before = backends_cpu(run.database.name)
    pool = concurrent.futures.ThreadPoolExecutor(args.clients)
    started = time.monotonic()
    try:
        for env_id, session_id in prepared:
            pool.submit(deploy, env_id, session_id)
        last_progress, ended = started, None
        while ended is None:
            run.check_alive()
            asked = time.monotonic()
            listing = api.call("GET", "/environments")["environments"]
            figures.listings += 1
            with lock:
                for env in listing:
                    if env["id"] in final:
                        continue
                    if env["id"] in answered and answered[env["id"]] < asked \
                            and env["status"] not in BUSY:
                        final[env["id"]] = env["status"]
                for env_id, why in refused.items():
                    final.setdefault(env_id, f"deploy refused: {why}")
            now = time.monotonic()
            if len(final) == len(prepared):
                ended = now
                break
            if now - started > args.timeout:
                raise RuntimeError(f"{len(prepared) - len(final)} environments still not final "
                                   f"after {args.timeout:.0f} s")
            if now - last_progress >= PROGRESS_EVERY:
                last_progress = now
                states = collections.Counter(final.values())
                progress(f"{run.conductors} conductor(s): {now - started:6.1f} s, "
                         f"{len(answered) + len(refused)}/{len(prepared)} deploys answered, "
                         f"{len(final)} final ({states.get('ready', 0)} ready)")
            time.sleep(max(0.0, args.poll - (time.monotonic() - asked)))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    cpu_final = ([cpu_seconds(run.api.popen.pid)] +
                 [cpu_seconds(p.popen.pid) for p in run.workers])
    figures.drained = wait_drained(run, started, args) - started
    cpu_after = ([cpu_seconds(run.api.popen.pid)] +
                 [cpu_seconds(p.popen.pid) for p in run.workers])
    machine_after, figures.bench_cpu = machine_jiffies(), own_cpu() - bench_before
    figures.postgres_cpu = backends_spent(backends_before, backends_cpu(run.database.name))
    figures.others = cpu_by_command(everyone_before, cpu_by_pid(),
                                    run.all_pids() | {os.getpid()})
    figures.machine_busy = ((machine_after[0] - machine_before[0]) /
                            max(machine_after[1] - machine_before[1], 1) * (os.cpu_count() or 1))
    figures.deploys_answered = max(answered.values(), default=started) - started
    figures.wall = ended - started
    figures.api_cpu = cpu_after[0] - cpu_before[0]
    figures.conductors_cpu = sum(cpu_after[1:]) - sum(cpu_before[1:])
    figures.api_cpu_final = cpu_final[0] - cpu_before[0]
    figures.conductors_cpu_final = sum(cpu_final[1:]) - sum(cpu_before[1:])
    figures.succeeded = sum(1 for s in final.values() if s == "ready")
    figures.failed = len(final) - figures.succeeded
    figures.failures = sorted({s for s in final.values() if s != "ready"})


def wait_drained(run: Run, started: float, args: argparse.Namespace) -> float:
    """The monotonic time the API's queues were first seen empty twice in a row."""
    backlog = Backlog(run.broker)
    try:
        empty_since, last_progress = None, time.monotonic()
        while True:
            run.check_alive()
            asked = time.monotonic()
            waiting = {name: n for name, n in backlog.count().items() if n}
            if not waiting:
                if empty_since is not None:
                    return empty_since
                empty_since = asked
            else:
                empty_since = None
            if asked - started > args.timeout:
                raise RuntimeError(f"the queues still hold {waiting} after {args.timeout:.0f} s")
            if asked - last_progress >= PROGRESS_EVERY:
                last_progress = asked
                progress(f"{run.conductors} conductor(s): {asked - started:6.1f} s, all final, "
                         f"waiting for the queues to empty: {waiting}")
            time.sleep(0.05)
    finally:
        backlog.close()


def one_deployment(api: Api, env_id: str) -> tuple[int, int]:
    """The reports and tasks one deployment stored (what each costs the API to take in)."""
    deployments = api.call("GET", f"/environments/{env_id}/deployments")["deployments"]
    if not deployments:
        return 0, 0
    job_id = deployments[-1]["id"]
    reports = api.call("GET", f"/environments/{env_id}/deployments/{job_id}")["reports"]
    job = api.call("GET", f"/environments/{env_id}/jobs/{job_id}")
    return len(reports), len(job.get("tasks") or [])


def one_run(conductors: int, args: argparse.Namespace) -> Figures:
    run = Run(conductors, args)
    figures = Figures(conductors, args.environments, api_workers_measured=args.api_workers)
    profiler = None
    try:
        progress(f"{conductors} conductor(s): starting (vhost {run.vhost.name}, "
                 f"database {run.database.name}, folder {run.workdir})")
        run.start()
        progress(f"{conductors} conductor(s): preparing {args.environments} environments "
                 f"of {args.units} units")
        prepared = prepare(Api(run.url), args.environments, args.units, args.clients)
        run.check_alive()
        figures.listing_cpu = listing_cpu(run)
        figures.background = background_load()
        quiet_until = time.monotonic() + args.wait_quiet
        while figures.background > QUIET and time.monotonic() < quiet_until:
            progress(f"{conductors} conductor(s): {figures.background:.2f} cores busy with "
                     f"ours idle (someone else's load); waiting for it to fall below {QUIET}")
            time.sleep(4.0)
            figures.background = background_load()
        if args.profile:
            profiler = Profiler(Path(args.profile), f"c{conductors}", run.processes,
                                args.profile_mode, args.api_workers, args.profile_rate)
        progress(f"{conductors} conductor(s): deploying ({figures.background:.2f} cores busy "
                 f"just before, with everything idle)")
        deploy_all(run, prepared, args, figures)
        if profiler:
            profiler.stop()
            profiler.seconds = figures.drained   # it sampled up to the queues' emptying
        figures.reports, figures.tasks = one_deployment(Api(run.url), prepared[0][0])
        figures.api_rss = tree_peak_rss_mb(run.api.popen.pid)
        figures.conductor_rss = max(peak_rss_mb(p.popen.pid) for p in run.workers)
        run.check_alive()
    except (OSError, ApiError) as exc:
        run.check_alive()   # a process that died says so, with its log, rather than this
        raise RuntimeError(f"{type(exc).__name__}: {exc}; the end of the API's log:\n"
                           f"{run.api.tail() if run.api else ''}") from exc
    finally:
        if profiler:
            profiler.stop()
        run.cleanup()
    if profiler:
        print(f"py-spy, {conductors} conductor(s), timed phase:")
        profiler.report(args.top)
    return figures


def ceilings(cost: dict[str, float], cores: int, conductors: int,
             api_workers: int) -> dict[str, float]:
    """Deployments/s each part allows on ``cores`` cores (the module's model)."""
    def most(cpu_cores: float, seconds: float) -> float:
        return cpu_cores / seconds if seconds > 0 else float("inf")
    return {
        f"{api_workers} API worker(s)": most(min(api_workers, cores), cost["api"]),
        f"{conductors} conductor(s)": most(min(conductors, cores), cost["conductors"]),
        "RabbitMQ": most(min(cores, RABBIT_CORES), cost["rabbitmq"]),
        "PostgreSQL": most(min(cores, POSTGRES_CORES), cost["postgresql"]),
        f"the {cores} cores": most(cores, sum(cost.values())),
    }


def projection(cost: dict[str, float], cores: int, conductors: int,
               api_workers: int) -> tuple[float, str]:
    """The deployments/s sustained and the part limiting it."""
    found = ceilings(cost, cores, conductors, api_workers)
    limit = min(found, key=found.get)
    return found[limit], limit


def print_projection(f: Figures, args: argparse.Namespace) -> None:
    cost = f.per_deployment()
    print(f"projection from the run of {f.conductors} conductor(s), {f.api_workers_measured} "
          f"API worker(s): CPU ms per deployment " + ", ".join(
              f"{name} {1000 * seconds:.1f}" for name, seconds in cost.items())
          + " (model: the module's docstring; a process <= 1 core, RabbitMQ <= "
            f"{RABBIT_CORES} cores, PostgreSQL <= {POSTGRES_CORES} cores, all on C cores)")
    workers = [int(m) for m in args.project_api_workers.split(",") if m.strip()]
    counts = [int(n) for n in args.project_conductors.split(",") if n.strip()]
    for cores in (int(c) for c in args.project_cores.split(",") if c.strip()):
        print(f"  {cores} cores: deployments/s (limited by), conductors down, API workers "
              f"across")
        for conductors in counts:
            cells = []
            for api_workers in workers:
                rate, limit = projection(cost, cores, conductors, api_workers)
                cells.append(f"M={api_workers}: {rate:7.1f} ({limit})")
            print(f"    N={conductors:<3d} " + "  ".join(cells))
    sys.stdout.flush()


def print_row(f: Figures) -> None:
    per = max(f.succeeded + f.failed, 1)
    print(f"{f.conductors} conductor(s): {f.rate:7.2f} deployments/s  wall {f.wall:7.2f} s  "
          f"succeeded {f.succeeded}  failed {f.failed}")
    print(f"    queues the API consumes empty after {f.drained:.2f} s; last deploy request "
          f"answered after {f.deploys_answered:.2f} s")
    print(f"    CPU s until the queues are empty: API {f.api_cpu:.2f} "
          f"({f.api_cpu / per:.3f} s/deployment), conductors {f.conductors_cpu:.2f} "
          f"({f.conductors_cpu / per:.3f} s/deployment) = "
          f"{(f.api_cpu + f.conductors_cpu) / max(f.drained, 1e-9):.2f} cores busy")
    print(f"    CPU s until the last final state: API {f.api_cpu_final:.2f}, conductors "
          f"{f.conductors_cpu_final:.2f}")
    print(f"    machine: {f.machine_busy:.2f} of {os.cpu_count()} cores busy until the queues "
          f"are empty ({f.background:.2f} the second before, with ours idle); other "
          f"processes, CPU s: " + ", ".join(
              f"{name} {seconds:.2f}" for name, seconds in f.others.most_common(4)
              if seconds >= 0.01) + f", this client {f.bench_cpu:.2f}")
    cost = f.per_deployment()
    print(f"    this benchmark's {f.listings} listings cost the API about "
          f"{f.polling_cpu:.2f} CPU s ({1000 * f.listing_cpu:.1f} ms each, measured idle): "
          f"left out below")
    print("    CPU ms per deployment: " + ", ".join(
        f"{name} {1000 * seconds:.1f}" for name, seconds in cost.items())
        + f" = {1000 * sum(cost.values()):.1f} in all (rabbitmq: the whole beam.smp, "
          f"anyone's vhosts; postgresql: this run's database's backends)")
    print(f"    one deployment stored {f.reports} reports and {f.tasks} tasks; peak RSS: "
          f"API {f.api_rss:.0f} MB, largest conductor {f.conductor_rss:.0f} MB")
    for failure in f.failures[:5]:
        print(f"    failure: {failure}")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conductors", default="1,2,4", help="conductor counts, comma separated")
    parser.add_argument("--environments", type=int, default=100, help="K environments per run")
    parser.add_argument("--units", type=int, default=4, help="U units per environment")
    parser.add_argument("--max-environments", type=int,
                        help="[conductor] max_environments of every conductor (default: "
                             "Fornace's default)")
    parser.add_argument("--api-workers", type=int, default=1,
                        help="fornace api --workers (CPU and RSS count the worker processes)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per conductor count; the speed-ups use each count's "
                             "median run (by deployments/s)")
    parser.add_argument("--clients", type=int, default=32,
                        help="threads sending the requests (deploys go out at once)")
    parser.add_argument("--poll", type=float, default=0.1, help="seconds between listings")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds a run's deployments may take")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                        help=f"before each timed phase, wait up to SECONDS for the machine's "
                             f"other load to fall below {QUIET} cores (a shared machine)")
    add_backend_options(parser)
    parser.add_argument("--profile", metavar="DIR",
                        help="py-spy record the processes during the timed phase into DIR")
    parser.add_argument("--profile-mode", choices=("gil", "active"), default="gil",
                        help="gil: CPU (samples of the thread holding the GIL); active: "
                             "every busy thread, waits on sockets and the database included")
    parser.add_argument("--profile-rate", type=int, default=Profiler.RATE,
                        help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=12, help="functions shown per profile")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folders")
    parser.add_argument("--project-cores", default="4,8,16",
                        help="core counts of the projection, comma separated")
    parser.add_argument("--project-conductors", default="1,2,4,8",
                        help="conductor counts N of the projection")
    parser.add_argument("--project-api-workers", default="1,2,4",
                        help="API worker counts M of the projection (fornace api --workers)")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.conductors.split(",") if c.strip()]
    if not counts or min(counts) < 1 or min(args.environments, args.units, args.repeat) < 1:
        parser.error("conductor counts, --environments, --units and --repeat must be at "
                     "least 1")

    def terminated(*_: Any) -> None:
        raise KeyboardInterrupt("SIGTERM")
    signal.signal(signal.SIGTERM, terminated)

    print(f"os.cpu_count() = {os.cpu_count()}; {args.environments} environments x "
          f"{args.units} units, max_environments "
          f"{args.max_environments or 'default'} per conductor, API workers {args.api_workers}, "
          f"polled every {args.poll} s"
          f"{', py-spy attached (slower)' if args.profile else ''}", flush=True)
    rows: dict[int, Figures] = {}
    all_succeeded = True
    try:
        for count in counts:
            runs = []
            for _ in range(args.repeat):
                runs.append(one_run(count, args))
                print_row(runs[-1])
                all_succeeded = all_succeeded and runs[-1].failed == 0
            rows[count] = sorted(runs, key=lambda f: f.rate)[(len(runs) - 1) // 2]
            if args.repeat > 1:
                print(f"{count} conductor(s), median of {len(runs)} runs: "
                      f"{rows[count].rate:.2f} deployments/s "
                      f"(all: {', '.join(f'{f.rate:.2f}' for f in runs)})", flush=True)
    except KeyboardInterrupt:
        progress("interrupted; everything started was stopped and removed")
        return 130
    except RuntimeError as exc:
        print(f"bench_scaleout: {exc}", file=sys.stderr)
        return 1
    if 1 in rows:
        base = rows[1].rate
        for count, figures in rows.items():
            if count != 1 and base:
                print(f"speed-up {count} conductors vs 1: {figures.rate / base:.2f} x")
        if 2 in rows and base:
            ratio = rows[2].rate / base
            target = TARGET if (os.cpu_count() or 1) > 2 else TARGET_BUSY
            print(f"target 2 conductors >= {target} x one on {os.cpu_count()} cores "
                  f"({TARGET} where cores are free, {TARGET_BUSY} on 2): {ratio:.2f} x  "
                  f"{'OK' if ratio >= target else 'MISSED'}")
    if rows:
        print_projection(rows[max(rows)], args)
    return 0 if all_succeeded else 1


if __name__ == "__main__":
    sys.exit(main())
