"""Real services for the tests (RabbitMQ, PostgreSQL, Heat), or a skip.

Messaging and storage are tested against the real servers of this machine.
Where one is missing the tests that need it skip, so the README test command
passes anywhere; CI sets ``FORNACE_REQUIRE_SERVICES=1`` to turn those skips
into failures.  URLs can be overridden with ``FORNACE_TEST_AMQP_URL``,
``FORNACE_TEST_DB_URL`` and ``FORNACE_HEAT_URL``.
"""
from __future__ import annotations

import importlib
import os
import socket
from typing import Any
from urllib.parse import urlsplit

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
    require("RabbitMQ", _reachable(AMQP_URL, 5672))
    return AMQP_URL


def postgres_url() -> str:
    require("PostgreSQL", _reachable(DB_URL.replace("+psycopg", ""), 5432))
    return DB_URL


def heat_url() -> str:
    url = os.environ.get("FORNACE_HEAT_URL", "")
    require("Heat (FORNACE_HEAT_URL)", bool(url) and _reachable(url, 8004))
    return url
