#!/usr/bin/env python3
"""A private PostgreSQL primary and streaming standby on spare ports (not a test).

For trying Fornace on a primary with a standby, and for the tests that stop
the primary and promote the standby (``tests/system/test_pg_failover.py``
loads this file from the checkout).  Everything lives in a temporary folder
of its own (``fornace-pgstandby-<pid>-…``): two clusters made with the
server's own ``initdb`` and ``pg_basebackup -R``, started with ``pg_ctl`` on
free ports of 127.0.0.1 with their sockets in that folder, trust
authentication.  The machine's own cluster (port 5432, ``pg_lsclusters``) is
never touched.  Run as root, the server commands run as the user
``postgres`` (PostgreSQL refuses to run as root).

The primary waits for the standby on every commit (``synchronous_standby_names``
names it, on the primary's command line only: a promoted standby must not
wait for a standby of its own that does not exist), so nothing committed is
lost when the primary dies.  On exit both servers are stopped and the folder
removed; a folder left by a process that was killed is cleaned by the next
start.

    python tools/pgstandby.py                # start, print the URL, wait for Ctrl-C
    python tools/pgstandby.py --measure      # writes through Fornace's engine while the
                                             # primary is stopped and the standby promoted:
                                             # prints the recovery time, checks nothing lost
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))   # the tools beside this one
from ports import spare_ports  # noqa: E402

PREFIX = "fornace-pgstandby-"
STANDBY_NAME = "fornace_standby"   # its application_name: what the primary waits for
START_TIMEOUT = 60.0               # seconds for a server to start, a standby to catch up


class PgStandbyError(RuntimeError):
    """A step of starting or failing over the pair did not work (with its log)."""


def server_bin() -> Path | None:
    """The folder of the newest PostgreSQL server installed (initdb, pg_ctl,
    pg_basebackup), None without one."""
    found = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")]
    for folder in sorted(found, key=lambda p: _version(p.parent.name), reverse=True):
        if all((folder / name).exists() for name in ("pg_ctl", "pg_basebackup")):
            return folder
    return None


def unavailable() -> str | None:
    """Why a pair cannot be started here (None: it can)."""
    if server_bin() is None:
        return "PostgreSQL server binaries (/usr/lib/postgresql/*/bin)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "the user postgres (the servers refuse to run as root)"
    return None


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", name)) or (0,)


@dataclass
class Server:
    """One cluster of the pair: its data folder, port and log."""

    name: str
    data: Path
    port: int
    log: Path

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return f"({self.name}: no log)"
        return f"--- {self.name} log, last lines:\n" + "\n".join(text.splitlines()[-lines:])


@dataclass
class Pair:
    """A primary streaming to a standby, in ``root``.  Use :func:`started`."""

    root: Path
    bindir: Path
    synchronous: bool = True
    primary: Server = field(init=False)
    standby: Server = field(init=False)
    promoted: bool = False

    def __post_init__(self) -> None:
        first, second = spare_ports(2)
        self.primary = Server("primary", self.root / "primary", first, self.root / "primary.log")
        self.standby = Server("standby", self.root / "standby", second, self.root / "standby.log")

    # -- what clients use ---------------------------------------------------------
    def url(self, database: str = "postgres", user: str = "postgres",
            driver: str = "postgresql+psycopg") -> str:
        """The multi-host URL of the pair: the primary first, then the standby,
        and libpq keeps the one that accepts writes (``target_session_attrs``)."""
        hosts = "&".join(f"host=127.0.0.1:{s.port}" for s in (self.primary, self.standby))
        return f"{driver}://{user}@/{database}?{hosts}&target_session_attrs=read-write"

    def server_url(self, server: Server, database: str = "postgres") -> str:
        """A URL of one server alone (what an operator's psql would use)."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{server.port}/{database}"

    def execute(self, server: Server, sql: str, database: str = "postgres") -> list[tuple]:
        """``sql`` on one server (autocommit); its rows, if any."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=server.port, user="postgres",
                             dbname=database, autocommit=True, connect_timeout=10) as conn:
            cursor = conn.execute(sql)
            return cursor.fetchall() if cursor.description else []

    def create_database(self, name: str) -> str:
        """A new database on the primary (streamed to the standby); its multi-host URL."""
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise ValueError(f"database name {name!r}: lower-case letters, digits and _ only")
        self.execute(self.primary, f'CREATE DATABASE "{name}"')
        return self.url(name)

    # -- life -----------------------------------------------------------------------
    def start(self) -> None:
        """initdb the primary, start it, copy it into the standby, start that, and
        wait until the primary streams to it (synchronously, by default)."""
        for folder in ("primary", "standby", "sockets"):
            (self.root / folder).mkdir(mode=0o700)
        self._chown()
        self._run("initdb", "-D", str(self.primary.data), "-U", "postgres", "--auth=trust",
                  "-E", "UTF8", "--no-sync")
        with open(self.primary.data / "postgresql.conf", "a") as conf:
            conf.write("\n# fornace-pgstandby\n"
                       "listen_addresses = '127.0.0.1'\n"
                       f"unix_socket_directories = '{self.root / 'sockets'}'\n"
                       "wal_level = replica\nmax_wal_senders = 5\nhot_standby = on\n"
                       "max_connections = 200\nshared_buffers = 32MB\n"
                       "log_min_messages = info\n")
        extra = f" -c synchronous_standby_names={STANDBY_NAME}" if self.synchronous else ""
        self._start(self.primary, extra)
        self._run("pg_basebackup", "-D", str(self.standby.data), "-R", "-X", "stream",
                  "-c", "fast", "-d", f"host=127.0.0.1 port={self.primary.port} "
                                      f"user=postgres application_name={STANDBY_NAME}")
        self._start(self.standby)
        wanted = "sync" if self.synchronous else "async"
        self._wait(lambda: self.execute(self.primary, (
            "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming' "
            f"AND application_name = '{STANDBY_NAME}'")) == [(wanted,)],
            f"the primary to stream to the standby ({wanted})")

    def stop_primary(self, mode: str = "immediate") -> None:
        """Stop the primary (``immediate``: as a crash would, no checkpoint)."""
        self._run("pg_ctl", "-D", str(self.primary.data), "-m", mode, "-w", "stop")

    def promote(self) -> float:
        """Promote the standby (``pg_ctl promote``, waiting until it accepts writes);
        the monotonic time at which it did."""
        self._run("pg_ctl", "-D", str(self.standby.data), "-w", "promote")
        self._wait(lambda: self.execute(self.standby, "SELECT pg_is_in_recovery()") == [(False,)],
                   "the standby to leave recovery")
        self.promoted = True
        return time.monotonic()

    def close(self) -> None:
        """Stop both servers and remove the folder."""
        _remove(self.root, self.bindir)

    # -- helpers --------------------------------------------------------------------
    def _start(self, server: Server, options: str = "") -> None:
        try:
            self._run("pg_ctl", "-D", str(server.data), "-l", str(server.log), "-w",
                      "-t", str(int(START_TIMEOUT)), "-o", f"-p {server.port}{options}",
                      "start")
        except PgStandbyError as exc:
            raise PgStandbyError(f"{exc}\n{server.tail()}") from None

    def _run(self, program: str, *args: str) -> str:
        return _as_server_user([str(self.bindir / program), *args], self.root)

    def _chown(self) -> None:
        if os.geteuid() != 0:
            return
        user = pwd.getpwnam("postgres")
        for path in [self.root, *self.root.iterdir()]:
            os.chown(path, user.pw_uid, user.pw_gid)

    def _wait(self, condition, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if condition():
                    return
            except Exception as exc:  # noqa: BLE001 -- starting: try again
                last = exc
            time.sleep(0.1)
        raise PgStandbyError(f"timed out after {START_TIMEOUT:g} s waiting for {what} "
                             f"({last})\n{self.primary.tail()}\n{self.standby.tail()}")


def _as_server_user(command: list[str], cwd: Path) -> str:
    """Run a server command (as ``postgres`` when we are root); its output, or
    :class:`PgStandbyError` with it."""
    options: dict = {}
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        options = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": [],
                   "env": {**os.environ, "HOME": user.pw_dir, "USER": "postgres"}}
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=START_TIMEOUT * 2, **options)
    if done.returncode != 0:
        raise PgStandbyError(f"{' '.join(command)} failed ({done.returncode}): "
                             f"{done.stdout}{done.stderr}".rstrip())
    return done.stdout


def _remove(root: Path, bindir: Path) -> None:
    """Stop whatever server runs in ``root`` and remove it."""
    for data in (root / "primary", root / "standby"):
        if (data / "postmaster.pid").exists():
            with contextlib.suppress(PgStandbyError, subprocess.TimeoutExpired):
                _as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate",
                                 "-w", "stop"], root)
    shutil.rmtree(root, ignore_errors=True)


def clean_leftovers() -> list[Path]:
    """Stop and remove the pairs of processes that died without doing it (their
    pid, in the folder's name, is gone); the folders removed."""
    bindir = server_bin()
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(PREFIX + "*"):
        pid = folder.name[len(PREFIX):].split("-")[0]
        if bindir is not None and pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _remove(folder, bindir)
            removed.append(folder)
    return removed


@contextlib.contextmanager
def started(synchronous: bool = True) -> Iterator[Pair]:
    """A running primary and standby, stopped and removed on exit."""
    bindir = server_bin()
    why = unavailable()
    if bindir is None or why:
        raise PgStandbyError(f"no PostgreSQL pair here: {why} missing")
    clean_leftovers()
    pair = Pair(Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")), bindir, synchronous)
    try:
        pair.start()
        yield pair
    finally:
        pair.close()


# -- --measure: the failover as Fornace's engine sees it ----------------------------------

def measure(pair: Pair) -> dict:
    """Write rows through :func:`fornace.common.db.engine.make_engine` on the pair's
    multi-host URL, one after another, while the primary is stopped and the
    standby promoted: seconds from the promotion to the first write that
    succeeds again, and whether every committed row is on the new primary."""
    from sqlalchemy import text

    from fornace.common.db.engine import make_engine

    engine = make_engine(pair.create_database("measure"))
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE writes (n integer PRIMARY KEY)"))
    committed: list[int] = []
    failures: list[str] = []
    stop = threading.Event()
    ok_after: list[float] = []

    def writer() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                with engine.begin() as conn:
                    conn.execute(text("INSERT INTO writes VALUES (:n)"), {"n": n})
                committed.append(n)
                if pair.promoted and not ok_after:
                    ok_after.append(time.monotonic())
            except Exception as exc:  # noqa: BLE001 -- counted: the outage
                failures.append(type(exc).__name__)
                time.sleep(0.05)
            time.sleep(0.01)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while len(committed) < 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    stopped_at = time.monotonic()
    pair.stop_primary()
    promoted_at = pair.promote()
    deadline = time.monotonic() + 60
    while not ok_after and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(10)
    with engine.connect() as conn:
        stored = {n for (n,) in conn.execute(text("SELECT n FROM writes"))}
    engine.dispose()
    return {"committed": len(committed), "lost": len(set(committed) - stored),
            "failed_writes": len(failures),
            "outage_s": (ok_after[0] - stopped_at) if ok_after else None,
            "recovery_after_promotion_s": (ok_after[0] - promoted_at) if ok_after else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--asynchronous", action="store_true",
                        help="asynchronous replication (the primary does not wait)")
    parser.add_argument("--measure", action="store_true",
                        help="fail over under writes through Fornace's engine; print the "
                             "recovery time and what was lost")
    args = parser.parse_args(argv)
    try:
        with started(synchronous=not args.asynchronous) as pair:
            print(f"primary 127.0.0.1:{pair.primary.port}, standby 127.0.0.1:"
                  f"{pair.standby.port} in {pair.root}", flush=True)
            if args.measure:
                result = measure(pair)
                print(" ".join(f"{key}={value if not isinstance(value, float) else f'{value:.3f}'}"
                               for key, value in result.items()))
                return 0 if result["lost"] == 0 and result["outage_s"] is not None else 1
            print(pair.url(), flush=True)
            stopping = threading.Event()
            for number in (signal.SIGINT, signal.SIGTERM):
                signal.signal(number, lambda *_: stopping.set())
            stopping.wait()
            return 0
    except PgStandbyError as exc:
        print(f"pgstandby: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
