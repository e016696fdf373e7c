#!/usr/bin/env python3
"""A private RabbitMQ cluster on spare ports, for tests and fault tools.

Starts ``--nodes`` RabbitMQ nodes named ``fornace-<tag>-<n>@localhost``, each
with its own AMQP and distribution port (free ones), its own database, logs
and (empty) plugin list under one temporary folder, and all with one Erlang
cookie in a private ``HOME`` (Erlang reads the cookie from
``$HOME/.erlang.cookie``; the machine's own cookie is never read). The
machine's configuration (``/etc/rabbitmq``) is not read either: each node gets
its own ``rabbitmq.conf`` that listens on 127.0.0.1 and its port only. The
second and later nodes join the first (``rabbitmqctl -n NODE stop_app``,
``join_cluster``, ``start_app``). Every node is killed, and the folder
removed, on :meth:`Cluster.stop` (or leaving the ``with`` block, or Ctrl-C):
their data is thrown away.

The machine's own node (``rabbit@localhost``) is never addressed: every
``rabbitmqctl`` call here names one of the cluster's nodes with ``-n``.

As a script it prints each node's URL and the failover URL of all of them
(``[broker] url``), then waits until Ctrl-C::

    python tools/rabbitcluster.py --nodes 3

Tests load it from the checkout (``tools/`` is not installed):
``tests/services.py``'s ``private_cluster(size)`` is a started :class:`Cluster`
(a skip without rabbitmq-server); other tools use :class:`Cluster` as a
context manager.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent))   # the tools beside this one
from ports import spare_ports  # noqa: E402

#: Where Debian's packages put the real scripts: /usr/sbin/rabbitmqctl is a
#: wrapper that, run as root, switches to the rabbitmq user (and so to the
#: machine's cookie); the scripts below run as whoever calls them.
SCRIPT_DIRS = (Path("/usr/lib/rabbitmq/bin"),)
START_TIMEOUT = 120.0     # seconds for a node to boot (await_startup)
CTL_TIMEOUT = 120.0       # seconds for any other rabbitmqctl call
LOGIN = PASSWORD = "guest"  # the default user every fresh node makes (loopback only)


class ClusterError(RuntimeError):
    """A node would not start, join or stop; the message names it and says why."""


def script(name: str) -> str:
    """The path of a RabbitMQ script (``rabbitmq-server``, ``rabbitmqctl``)."""
    for folder in SCRIPT_DIRS:
        if (folder / name).exists():
            return str(folder / name)
    found = shutil.which(name)
    if found is None:
        raise ClusterError(f"{name} is not installed (apt-get install rabbitmq-server)")
    return found


def installed() -> bool:
    """True when rabbitmq-server and rabbitmqctl can be found."""
    try:
        script("rabbitmq-server")
        script("rabbitmqctl")
        return True
    except ClusterError:
        return False


def accepts(port: int, timeout: float = 1.0) -> bool:
    """True when something listens on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class Node:
    """One node of the cluster."""
    name: str           # fornace-<tag>-<n>@localhost
    port: int           # AMQP, on 127.0.0.1
    dist_port: int      # Erlang distribution (clustering)
    folder: Path
    process: subprocess.Popen | None = None

    def url(self, vhost: str = "/") -> str:
        """The AMQP URL of this node (``guest``, which fresh nodes make)."""
        path = "/" if vhost == "/" else quote(vhost, safe="")
        return f"amqp://{LOGIN}:{PASSWORD}@127.0.0.1:{self.port}/{path}"

    @property
    def log(self) -> Path:
        return self.folder / "log" / "console.log"

    def tail(self, lines: int = 30) -> str:
        """The last lines of the node's console output (for error messages)."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no output)"


@dataclass
class Cluster:
    """``size`` nodes clustered together; see the module's docstring."""
    size: int = 3
    root: Path | None = None
    nodes: list[Node] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError("a cluster needs at least one node")
        self._own_root = self.root is None
        self.root = Path(self.root or tempfile.mkdtemp(prefix="fornace-rabbitcluster-"))
        self.home = self.root / "home"
        tag = secrets.token_hex(3)   # two clusters at once (two test runs) never collide
        ports = spare_ports(2 * self.size)
        self.nodes = [Node(f"fornace-{tag}-{n}@localhost", ports[2 * n - 2], ports[2 * n - 1],
                           self.root / f"node{n}") for n in range(1, self.size + 1)]

    # -- URLs ------------------------------------------------------------------
    def url(self, vhost: str = "/") -> str:
        """Every node's URL, ``;``-separated: kombu's failover form of ``[broker] url``."""
        return ";".join(node.url(vhost) for node in self.nodes)

    # -- running ---------------------------------------------------------------
    def environ(self, node: Node | None = None) -> dict[str, str]:
        """The environment of the RabbitMQ scripts for ``node`` (or for
        ``rabbitmqctl`` alone): the private HOME (its cookie) and the private
        configuration files, never the machine's."""
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("RABBITMQ_", "ERL_"))}
        env.update(HOME=str(self.home), LC_ALL="C.UTF-8", ERL_EPMD_ADDRESS="127.0.0.1",
                   RABBITMQ_CONF_ENV_FILE=str(self.root / "rabbitmq-env.conf"))
        if node is not None:
            env.update(
                RABBITMQ_NODENAME=node.name, RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
                RABBITMQ_NODE_PORT=str(node.port), RABBITMQ_DIST_PORT=str(node.dist_port),
                RABBITMQ_MNESIA_BASE=str(node.folder / "mnesia"),
                RABBITMQ_LOG_BASE=str(node.folder / "log"),
                RABBITMQ_PID_FILE=str(node.folder / "rabbit.pid"),
                RABBITMQ_CONFIG_FILE=str(node.folder / "rabbitmq.conf"),
                RABBITMQ_ADVANCED_CONFIG_FILE=str(node.folder / "advanced.config"),
                RABBITMQ_ENABLED_PLUGINS_FILE=str(node.folder / "enabled_plugins"),
                RABBITMQ_PLUGINS_EXPAND_DIR=str(node.folder / "plugins-expand"),
                # the distribution listens on the loopback only, as the AMQP port
                RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface "
                                                   "{127,0,0,1}")
        return env

    def ctl(self, node: Node, *args: str, timeout: float = CTL_TIMEOUT,
            check: bool = True) -> str:
        """``rabbitmqctl -n NODE args``; its output (ClusterError when it fails and
        ``check``)."""
        command = [script("rabbitmqctl"), "-n", node.name, *args]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                  env=self.environ(), stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            if check:
                raise ClusterError(f"rabbitmqctl -n {node.name} {' '.join(args)}: no answer "
                                   f"within {timeout:g} s") from None
            return ""
        if check and done.returncode != 0:
            raise ClusterError(f"rabbitmqctl -n {node.name} {' '.join(args)} failed "
                               f"({done.returncode}): {(done.stdout + done.stderr).strip()}")
        return done.stdout

    def start(self) -> "Cluster":
        """Boot every node (at once), then join the others to the first."""
        self._prepare()
        try:
            for node in self.nodes:
                self._launch(node)
            for node in self.nodes:
                self._await(node)
            first = self.nodes[0]
            for node in self.nodes[1:]:
                self.ctl(node, "stop_app")
                self.ctl(node, "join_cluster", first.name)
                self.ctl(node, "start_app")
                self._await(node)
        except BaseException:
            self.stop()
            raise
        return self

    def _prepare(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        cookie = self.home / ".erlang.cookie"
        if not cookie.exists():
            cookie.write_text(secrets.token_hex(16).upper())
            cookie.chmod(0o400)   # Erlang refuses a cookie others can read
        (self.root / "rabbitmq-env.conf").write_text("# empty: not /etc/rabbitmq's\n")
        for node in self.nodes:
            node.folder.mkdir(parents=True, exist_ok=True)
            (node.folder / "log").mkdir(exist_ok=True)
            (node.folder / "enabled_plugins").write_text("[].\n")
            (node.folder / "rabbitmq.conf").write_text(
                f"listeners.tcp.default = 127.0.0.1:{node.port}\n"
                # a test machine's disk may be nearly full: do not block publishers
                "disk_free_limit.absolute = 1MB\n")

    def _launch(self, node: Node) -> None:
        with open(node.log, "ab") as out:
            # a session of its own: kill() takes the shell, the VM and its helpers
            node.process = subprocess.Popen([script("rabbitmq-server")], env=self.environ(node),
                                            stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True,
                                            cwd=node.folder)

    def _await(self, node: Node) -> None:
        """Wait until ``node`` runs RabbitMQ and takes AMQP connections."""
        try:
            # ``wait`` waits for the node's pid file, then for RabbitMQ to run
            # (await_startup gives up at once while the node is not registered yet)
            self.ctl(node, "wait", str(node.folder / "rabbit.pid"), "--timeout",
                     str(int(START_TIMEOUT)), timeout=START_TIMEOUT + 30)
        except ClusterError as exc:
            raise ClusterError(f"{exc}\n--- {node.name} console:\n{node.tail()}") from None
        deadline = time.monotonic() + START_TIMEOUT
        pause = threading.Event()
        while not accepts(node.port):
            if time.monotonic() > deadline:
                raise ClusterError(f"{node.name} runs but takes no connection on port "
                                   f"{node.port}\n{node.tail()}")
            pause.wait(0.1)

    # -- faults ------------------------------------------------------------------
    def stop_app(self, node: Node) -> None:
        """Stop RabbitMQ on ``node`` (its VM stays): its clients are cut off."""
        self.ctl(node, "stop_app")

    def start_app(self, node: Node) -> None:
        """Start RabbitMQ again on a node stopped with :meth:`stop_app`."""
        self.ctl(node, "start_app")
        self._await(node)

    def kill(self, node: Node) -> None:
        """SIGKILL ``node``'s processes (a machine pulled from the wall)."""
        if node.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.process.pid, signal.SIGKILL)
        node.process.wait(timeout=60)
        node.process = None

    def revive(self, node: Node) -> None:
        """Boot a node :meth:`kill` took down again: it keeps its data, so it
        rejoins the cluster (its quorum queues catch up from the others)."""
        self._launch(node)
        self._await(node)

    def node_of(self, port: int) -> Node | None:
        """The node listening on AMQP ``port`` (None: none of this cluster's)."""
        return next((node for node in self.nodes if node.port == port), None)

    # -- stopping ----------------------------------------------------------------
    def stop(self) -> None:
        """Kill every node still running and remove the folder (if it made it).

        Killed, not shut down: the nodes' data is thrown away with the folder,
        and a clean shutdown of a cluster takes ten seconds a node."""
        for node in self.nodes:
            self.kill(node)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=3, help="how many nodes (default 3)")
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error("--nodes must be at least 1")
    stopped = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())
    began = time.monotonic()
    try:
        with Cluster(args.nodes) as started:
            print(f"{args.nodes} node(s) up in {time.monotonic() - began:.1f} s "
                  f"(folder {started.root}):", flush=True)
            for node in started.nodes:
                print(f"  {node.name}  {node.url()}", flush=True)
            print(f"[broker] url = {started.url()}", flush=True)
            print("Ctrl-C stops them.", flush=True)
            stopped.wait()
            print("stopping", flush=True)
    except ClusterError as exc:
        print(f"rabbitcluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
