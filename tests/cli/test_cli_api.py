"""``fornace api`` as a command: it serves, and refuses what cannot work."""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest

from apikit import free_port
from fornace.cli.main import main
from waiting import wait_for



def post_when_up(process, port: int, name: str) -> dict:
    """POST an environment once the server answers (it is polled while it starts)."""
    def posted() -> dict | None:
        try:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/environments", data=json.dumps({"name": name}).encode(),
                headers={"Content-Type": "application/json"}, method="POST")
            with urllib.request.urlopen(request, timeout=2) as response:
                return json.load(response)
        except OSError:
            assert process.poll() is None, process.stdout.read().decode()
            return None
    return wait_for(posted, "fornace api to start", timeout=60, interval=0.2)


@pytest.mark.parametrize("logs_first", [False, True], ids=["logs-after", "logs-before"])
def test_api_command_serves_and_keeps_data(tmp_path, logs_first):
    """oslo.log's options after the command or before it, as README says."""
    port = free_port()
    db = f"sqlite:///{tmp_path / 'cli.sqlite'}"
    log = tmp_path / "api.log"
    logging = ["--log-file", str(log), "--debug"]
    command = ["api", "--port", str(port), "--db", db]
    process = subprocess.Popen([sys.executable, "-m", "fornace.cli",
                                *(logging + command if logs_first else command + logging)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        created = post_when_up(process, port, "cli")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/environments") as response:
            listed = json.load(response)
            request_id = response.headers["x-openstack-request-id"]
        assert [e["id"] for e in listed["environments"]] == [created["id"]]
    finally:
        process.terminate()
        process.wait(10)
    # oslo.log: --log-file and --debug; uvicorn's lines there too
    text = log.read_text()
    assert " DEBUG " in text and " fornace." in text
    assert "POST /v1/environments" in text and "Application startup complete" in text
    # the request's line names its id (oslo.log's logging_context_format_string)
    line, = [line for line in text.splitlines() if '"GET /environments HTTP' in line]
    assert f"[None {request_id} demo demo " in line
    assert process.stdout.read().decode().strip() == ""   # nothing left on the console


def test_api_workers_take_the_same_options(tmp_path):
    """Each worker process parses the command line as the parent did."""
    port = free_port()
    conf = tmp_path / "fornace.conf"
    conf.write_text(f"[broker]\nurl = filesystem://{tmp_path / 'broker'}\n"
                    f"[database]\nconnection = sqlite:///{tmp_path / 'w.sqlite'}\n")
    log = tmp_path / "api.log"
    process = subprocess.Popen([sys.executable, "-m", "fornace.cli", "api", "--port", str(port),
                                "--workers", "2", "--config-file", str(conf),
                                "--log-file", str(log)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        post_when_up(process, port, "w1")
        post_when_up(process, port, "w2")
    finally:
        process.terminate()
        process.wait(20)
    text = log.read_text()
    assert text.count("Application startup complete") == 2, text[-3000:]


def test_workers_need_a_shared_broker(capsys):
    assert main(["api", "--workers", "2"]) == 2
    assert "amqp://" in capsys.readouterr().err


def test_help_of_every_command(capsys):
    for args in (["--help"], ["api", "--help"], ["workflow", "--help"]):
        try:
            code = main(args)
        except SystemExit as exc:   # argparse's --help of a command
            code = exc.code
        assert code == 0, args
        out = capsys.readouterr().out
        assert "usage: fornace" in out


def test_config_file_may_follow_the_subcommand(tmp_path, capsys):
    from fornace.cli.main import hoist_global_options

    assert hoist_global_options(["api", "--config-file", "f.conf", "--port", "1"]) == \
        ["--config-file", "f.conf", "api", "--port", "1"]
    assert hoist_global_options(["agent", "--config-dir=d"]) == ["--config-dir=d", "agent"]
    conf = tmp_path / "fornace.conf"
    conf.write_text("[api]\nworkers = 2\n")  # memory broker: refused, which proves it was read
    assert main(["api", "--config-file", str(conf)]) == 2
    assert "amqp://" in capsys.readouterr().err
