"""End to end on one machine: the API, the conductor and the local cloud's real agents.

``fornace demo`` and ``fornace up`` as their users run them, and a deployment
through the REST API on the folder broker with SQLite, and on RabbitMQ with
PostgreSQL: the units' scripts really run (their sites answer), the reports
and the final model are stored, and deleting the environment removes the
stack and stops every process of its units.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from fornace.cli.client.http import ApiClient, ClientError
from apikit import free_port, reset_postgres
from fornace.cli.demo import Demo
from fornace.cli.main import build_conf
from localkit import instance_processes, running_onebox
from services import postgres_url
from waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120.0


def fornace(*args: str) -> list[str]:
    return [sys.executable, "-m", "fornace.cli", *args]


def environment_without_leftovers(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(tmp_path)}


# ------------------------------------------------------------------ the commands

def test_fornace_demo_deploys_checks_and_removes_an_environment(tmp_path):
    done = subprocess.run(fornace("demo", "--site-port", str(free_port())), cwd=tmp_path,
                          env=environment_without_leftovers(tmp_path), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert out.count("answers with the site") == 2
    assert "Service demo-site is ready" in out and "environment deleted" in out
    assert "fornace demo: success" in out


def test_fornace_up_serves_the_api_until_interrupted(tmp_path):
    port = free_port()
    config = tmp_path / "fornace.conf"
    config.write_text(f"[api]\nstate_dir = {tmp_path / 'state'}\n")
    process = subprocess.Popen(fornace("--config-file", str(config), "up", "--port", str(port)),
                               cwd=tmp_path, env=environment_without_leftovers(tmp_path),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines: list[str] = []

        def read() -> None:
            for line in process.stdout:
                lines.append(line)
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        wait_for(lambda: any(line.startswith("Press Ctrl-C") for line in lines)
                 or not reader.is_alive(), "fornace up to say it is up", timeout=60,
                 explain=lambda: "".join(lines))
        text = "".join(lines)
        assert "Fornace is up" in text, text
        assert f"  dashboard    http://127.0.0.1:{port}/dashboard/  " in text
        assert f"  API          http://127.0.0.1:{port}/  " in text
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/dashboard/", timeout=10)
        assert page.status == 200 and "text/html" in page.headers["Content-Type"]
        assert f"filesystem://{tmp_path / 'state' / 'broker'}" in text
        client = ApiClient(f"http://127.0.0.1:{port}")
        assert client.post("/environments", {"name": "up"})["name"] == "up"
        assert [e["name"] for e in client.get("/environments")["environments"]] == ["up"]
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        reader.join(10)          # the pipe's end, once the process is gone
        process.stdout.close()
    assert (tmp_path / "state" / "fornace.sqlite").is_file()


# ------------------------------------------------------ a deployment through the API

@pytest.fixture(params=["folder+sqlite", "rabbitmq+postgresql"])
def box(request, tmp_path):
    conf = build_conf()
    conf(["up"], project="fornace", default_config_files=[], default_config_dirs=[])
    db = None
    if request.param.startswith("rabbitmq"):
        url = request.getfixturevalue("amqp_vhost")
        parts = urlsplit(url)
        conf.set_override("url", url, group="broker")
        for key, value in (("host", parts.hostname), ("port", parts.port or 5672),
                           ("login", unquote(parts.username or "guest")),
                           ("password", unquote(parts.password or "guest")),
                           ("virtual_host", unquote(parts.path[1:]) or "/")):
            conf.set_override(key, value, group="rabbitmq")
        db = postgres_url()
        reset_postgres(db)
    yield from running_onebox(tmp_path / "state", max_environments=1, db=db, conf=conf)


def test_a_linux_service_deployed_through_the_api_runs_and_is_removed(box):
    client = ApiClient(box.url)
    port = free_port()
    demo = Demo(client, lambda text: None, TIMEOUT)
    environment = demo.deploy(units=2, port=port)

    # the final model is stored: every unit has its hostname, address and site
    units = environment["services"][0]["units"]
    states = [u["state"] for u in units]
    assert [s["hostname"] for s in states] == ["web1", "web2"]
    assert all(s["siteDeployed"] is True for s in states)
    addresses = [s["address"] for s in states]
    assert len(set(addresses)) == 2 and all(a.startswith("127.") for a in addresses)
    assert environment["version"] == 1

    # the units' scripts really ran: each answers on its own address
    for address in addresses:
        with urllib.request.urlopen(f"http://{address}:{port}/", timeout=10) as page:
            assert "<h1>demo-site</h1>" in page.read().decode()

    # reports are stored with the deployment, each once
    env_id = environment["id"]
    deployment = client.get(f"/environments/{env_id}/deployments")["deployments"][0]
    assert deployment["state"] == "success"
    texts = [r["text"] for r in client.get(
        f"/environments/{env_id}/deployments/{deployment['id']}")["reports"]]
    for unit in ("web1", "web2"):
        assert texts.count(f"Deploying the web site on {unit}") == 1
        assert any(t.startswith(f"Web site deployed on {unit}: serving http://") for t in texts)
    assert texts[-1] == "Service demo-site is ready"

    # deleting the environment removes the stack and stops the units' processes
    stack = f"e{env_id}"
    tokens = [i["token"] for i in box.cloud.instances(stack).values()]
    assert len(tokens) == 2 and all(instance_processes(t) for t in tokens)
    demo.delete()
    assert stack not in box.cloud.stack_names()
    assert not (box.cloud.state_dir / stack).exists()
    assert not any(instance_processes(t) for t in tokens)
    with pytest.raises(ClientError, match="^environment [0-9a-f]+ not found") as gone:
        client.get(f"/environments/{env_id}")
    assert gone.value.status == 404
    for address in addresses:
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://{address}:{port}/", timeout=5)
