"""``fornace api`` as a command: it serves, and refuses what cannot work."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

from apikit import free_port
from fornace.cli.main import main



def test_api_command_serves_and_keeps_data(tmp_path):
    port = free_port()
    db = f"sqlite:///{tmp_path / 'cli.sqlite'}"
    process = subprocess.Popen([sys.executable, "-m", "fornace.cli", "api", "--port",
                                str(port), "--db", db], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/v1/environments", data=b'{"name": "cli"}',
                    headers={"Content-Type": "application/json"}, method="POST")
                with urllib.request.urlopen(request, timeout=2) as response:
                    created = json.load(response)
                break
            except OSError:
                assert process.poll() is None, process.stdout.read().decode()
                assert time.monotonic() < deadline, "fornace api did not start"
                time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/environments") as response:
            listed = json.load(response)
        assert [e["id"] for e in listed["environments"]] == [created["id"]]
    finally:
        process.terminate()
        process.wait(10)


def test_workers_need_a_shared_broker(capsys):
    assert main(["api", "--workers", "2"]) == 2
    assert "amqp://" in capsys.readouterr().err


def test_help_of_every_command(capsys):
    for args in (["--help"], ["api", "--help"], ["workflow", "--help"]):
        try:
            main(args)
        except SystemExit as exc:
            assert exc.code == 0
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
