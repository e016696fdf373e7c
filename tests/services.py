"""Real services for the tests (RabbitMQ, PostgreSQL, Heat), or a skip.

Messaging and storage are tested against the real servers of this machine.
Where one is missing the tests that need it skip, so the README test command
passes anywhere; CI sets ``FORNACE_REQUIRE_SERVICES=1`` to turn those skips
into failures.  URLs can be overridden with ``FORNACE_TEST_AMQP_URL``,
``FORNACE_TEST_DB_URL``, ``FORNACE_HEAT_URL`` and ``FORNACE_KEYSTONE_URL`` (the
last two are set by ``.ci/run`` from ``../shared/heat/heat-up`` and
``../shared/keystone/keystone-up``).
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import pytest

AMQP_URL = os.environ.get("FORNACE_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
DB_URL = os.environ.get("FORNACE_TEST_DB_URL",
                        "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _reachable(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1",
                                       parts.port or default_port), timeout=2):
            return True
    except OSError:
        return False


def require(name: str, available: bool) -> None:
    """Skip (or fail under FORNACE_REQUIRE_SERVICES=1) when a service is missing."""
    if available:
        return
    message = f"{name} is not available"
    if os.environ.get("FORNACE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{message} and FORNACE_REQUIRE_SERVICES=1")
    pytest.skip(message, allow_module_level=True)


def import_or_require(module: str) -> Any:
    """The module, or a skip (a failure under FORNACE_REQUIRE_SERVICES=1) when a
    test extra is not installed -- the one switch, as for the services."""
    try:
        return importlib.import_module(module)
    except ImportError:
        require(f"Python module {module} (pip install -e '.[test]')", False)


def amqp_url() -> str:
    """The test broker's base URL (its default vhost): only for what makes vhosts;
    tests use :func:`private_vhost` (the ``amqp_vhost`` fixture)."""
    require("RabbitMQ", _reachable(AMQP_URL, 5672))
    return AMQP_URL


def postgres_url() -> str:
    """A PostgreSQL database of this test run's own: made on first use from the
    server of ``FORNACE_TEST_DB_URL`` (default: the machine's ``test`` database)
    and dropped when the run ends, so that two runs on one machine (a developer's
    and a helper's, CI's) never reset each other's tables."""
    require("PostgreSQL", _reachable(DB_URL.replace("+psycopg", ""), 5432))
    return _private_database()


@functools.lru_cache(maxsize=1)
def _private_database() -> str:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    base = make_url(DB_URL)
    name = f"fornace_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    engine = create_engine(base, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        # those of runs that were killed before they could drop theirs
        for (left,) in connection.execute(text(
                "SELECT datname FROM pg_database WHERE datname LIKE 'fornace_test_%'")):
            pid = left.split("_")[2]
            if pid.isdigit() and not _alive(int(pid)):
                connection.execute(text(f'DROP DATABASE IF EXISTS "{left}" WITH (FORCE)'))
        connection.execute(text(f'CREATE DATABASE "{name}"'))

    def drop() -> None:
        with engine.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()
    atexit.register(drop)
    return base.set(database=name).render_as_string(hide_password=False)


def heat_url() -> str:
    url = os.environ.get("FORNACE_HEAT_URL", "")
    require("Heat (FORNACE_HEAT_URL)", bool(url) and _reachable(url, 8004))
    return url


def keystone_url() -> str:
    """The identity v3 URL of the real Keystone of ``../shared/keystone/keystone-up``
    (``FORNACE_KEYSTONE_URL``, e.g. http://127.0.0.1:5000/v3)."""
    url = os.environ.get("FORNACE_KEYSTONE_URL", "")
    require("Keystone (FORNACE_KEYSTONE_URL)", bool(url) and _reachable(url, 5000))
    return url


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- a virtual host of its own for every RabbitMQ test --------------------------------

def rabbitmqctl(*args: str, timeout: float = 120.0, check: bool = True) -> str:
    done = subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True,
                          timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"rabbitmqctl {' '.join(args)} failed ({done.returncode}): "
                             f"{done.stdout}{done.stderr}")
    return done.stdout


@functools.lru_cache(maxsize=1)
def rabbitmqctl_works() -> bool:
    if shutil.which("rabbitmqctl") is None:
        return False
    try:
        return subprocess.run(["rabbitmqctl", "list_vhosts"], capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@dataclass
class Rabbit:
    url: str            # the test's own virtual host
    host: str
    port: int
    login: str
    password: str
    vhost: str

    def queues(self) -> list[str]:
        """The names of the virtual host's queues, as the broker lists them."""
        out = rabbitmqctl("list_queues", "-p", self.vhost, "name", "--quiet",
                          "--no-table-headers")
        return sorted(line.strip() for line in out.splitlines() if line.strip())


@contextlib.contextmanager
def private_vhost(prefix: str = "fornace-test") -> Iterator[Rabbit]:
    """A virtual host of its own on the real RabbitMQ (queues no other test
    sees), deleted afterwards; skip/fail as the services do without it."""
    base = urlsplit(amqp_url())
    require("rabbitmqctl (to make a virtual host on the test broker)", rabbitmqctl_works())
    vhost = f"{prefix}-{uuid.uuid4().hex[:10]}"
    login, password = unquote(base.username or "guest"), unquote(base.password or "guest")
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, login, ".*", ".*", ".*")
        netloc = base.netloc.rsplit("@", 1)[-1]
        url = urlunsplit(("amqp", f"{quote(login, safe='')}:{quote(password, safe='')}@{netloc}",
                          "/" + quote(vhost, safe=""), "", ""))
        yield Rabbit(url, base.hostname or "127.0.0.1", base.port or 5672, login, password,
                     vhost)
    finally:
        rabbitmqctl("delete_vhost", vhost, check=False)


# -- RabbitMQ nodes of the tests' own (tools/rabbitcluster.py) ------------------------

ROOT = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=None)
def tool(name: str) -> Any:
    """``tools/NAME.py`` of this checkout, loaded as module ``name`` (``tools/``
    is not installed)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module     # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def rabbit_cluster_tool() -> Any:
    """``tools/rabbitcluster.py``, or a skip (a failure under
    FORNACE_REQUIRE_SERVICES=1) without rabbitmq-server."""
    module = tool("rabbitcluster")
    require("rabbitmq-server (to start private RabbitMQ nodes)", module.installed())
    return module


def pg_server_tool() -> Any:
    """``tools/pgstandby.py``, or a skip (a failure under FORNACE_REQUIRE_SERVICES=1)
    where private PostgreSQL servers cannot be started (no server binaries, or
    root without the user postgres)."""
    module = tool("pgstandby")
    why = module.unavailable()
    require(f"private PostgreSQL servers ({why})", why is None)
    return module


@contextlib.contextmanager
def private_cluster(size: int) -> Iterator[Any]:
    """A started cluster of ``size`` private RabbitMQ nodes on spare ports (never
    the machine's node), killed afterwards: a ``rabbitcluster.Cluster``. Slow to
    start (tens of seconds): use one per module."""
    with rabbit_cluster_tool().Cluster(size) as cluster:
        yield cluster
