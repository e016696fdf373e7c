"""Helpers of the client commands' tests: run ``fornace`` as its users run it
(``python -m fornace.cli`` in a subprocess, standard input not a terminal) and
read what it printed."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable

import httpx

Runner = Callable[..., subprocess.CompletedProcess]


def runner(url: str, home: Path) -> Runner:
    """``run(*args, env={...})``: ``fornace ARGS`` against the API at ``url``, with
    ``home`` as its home and sessions file, standard input from /dev/null (as in a
    script: nothing can be asked), ``env`` added to its environment."""
    environment = {**os.environ, "HOME": str(home), "FORNACE_URL": url,
                   "FORNACE_SESSIONS": str(home / "sessions")}
    for name in ("FORNACE_TOKEN", "FORNACE_TENANT"):
        environment.pop(name, None)

    def run(*args: str, timeout: float = 120,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fornace.cli", *args], cwd=home,
                              env={**environment, **(env or {})}, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)
    return run


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def as_json(done: subprocess.CompletedProcess) -> object:
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def one_line_error(done: subprocess.CompletedProcess, code: int) -> str:
    assert done.returncode == code, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fornace: "), done.stderr
    return lines[0]


def site(name: str, port: int, units: int = 1) -> dict:
    """A linuxWebServer service of the local cloud serving on ``port``."""
    return {"name": name, "type": "linuxWebServer", "port": port,
            "unitNamingPattern": f"{name}#", "osImage": {"name": "local", "type": "linux"},
            "units": [{} for _ in range(units)]}


def dashboard_page(url: str, path: str) -> str:
    """A page of the dashboard of the API at ``url``, logged in (noauth) as the
    tenant and user the commands are, without ``--tenant``."""
    with httpx.Client(base_url=url, headers={"Origin": url}) as client:
        token = re.search(r'name="csrf_token" value="([^"]+)"',
                          client.get("/dashboard/login").text).group(1)
        client.post("/dashboard/login", data={"csrf_token": token, "tenant": "demo",
                                               "user": "demo"})
        page = client.get("/dashboard" + path)
        assert page.status_code == 200, page.text
        return page.text
