"""tools/probe_inputs.py in full: every hostile input refused cleanly.

Operator inputs to `fornace workflow check/simulate` (under a memory and a
time limit), command-line inputs, API requests, workflow packages, ids and
names, secrets, dashboard forms and poisoned messages to a `fornace up` of
its own; the tool judges each from the outside (no traceback, a non-zero exit
or the expected HTTP status with a JSON error, a message that says where,
nothing changed, no secret shown, no traceback in the logs).  Once on the
embedded backends (SQLite, folder broker), once on the production ones
(PostgreSQL, RabbitMQ): some inputs are refused by PostgreSQL only.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from apikit import reset_postgres
from services import postgres_url, private_vhost

ROOT = Path(__file__).resolve().parents[2]


def probe(*args: str) -> tuple[int, list[str], subprocess.CompletedProcess]:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "probe_inputs.py"), *args],
                          capture_output=True, text=True, timeout=900)
    lines = done.stdout.strip().splitlines()
    summary = lines[-1] if lines else ""
    found = re.fullmatch(r"(\d+) tries: (\d+) clean, (\d+) not clean", summary)
    assert found, done.stdout[-4000:] + done.stderr[-4000:]
    tries, clean, unclean = map(int, found.groups())
    assert clean == tries and unclean == 0, "\n".join(lines[-40:])
    assert done.returncode == 0
    return tries, lines, done


@pytest.mark.timeout(1200)   # above the tool's own 900 s limit
def test_every_hostile_input_is_refused_cleanly():
    tries, _, _ = probe()
    assert tries >= 140


@pytest.mark.timeout(1200)
def test_every_hostile_input_is_refused_cleanly_on_postgresql_and_rabbitmq():
    database = postgres_url()
    reset_postgres(database)
    with private_vhost() as rabbit:
        tries, _, _ = probe("--database", database, "--broker", rabbit.url,
                            *[arg for group in ("api", "names", "packages", "secrets",
                                                "dashboard", "messages")
                              for arg in ("--only", group)])
    reset_postgres(database)
    assert tries >= 60
