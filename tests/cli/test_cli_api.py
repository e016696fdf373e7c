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
    """oslo.log's options after the command or before it, as the operators'
    guide says (doc/source/admin/services.rst)."""
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


def run_daemon(*args: str) -> subprocess.CompletedProcess:
    """A daemon command expected to end at once (it refuses to start)."""
    return subprocess.run([sys.executable, "-m", "fornace.cli", *args], capture_output=True,
                          text=True, timeout=120)


def last_line_only_error(done: subprocess.CompletedProcess, code: int) -> str:
    """The command's exit status is ``code`` and its error one line, no traceback
    (a daemon may have logged its start before)."""
    assert done.returncode == code, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("command", ["api", "up"])
def test_daemon_on_a_database_it_cannot_use(command, tmp_path):
    """Unreachable once its ``[database] max_retries`` are spent: exit 3, the
    URL named with its password masked; no such dialect: exit 2 -- as ``fornace
    db`` says it, never a traceback."""
    def started(url: str) -> subprocess.CompletedProcess:
        config = tmp_path / "fornace.conf"
        config.write_text(f"[database]\nconnection = {url}\nmax_retries = 1\n"
                          "retry_interval = 1\n")
        return run_daemon(command, "--config-file", str(config), "--port", str(free_port()))

    refused = started("postgresql+psycopg://fornace:sekret@127.0.0.1:1/fornace")
    line = last_line_only_error(refused, 3)
    assert line.startswith(f"fornace {command}: the database "
                           "postgresql+psycopg://fornace:***@127.0.0.1:1/fornace cannot be used: ")
    assert "sekret" not in refused.stdout + refused.stderr
    said = (refused.stdout + refused.stderr).splitlines()
    assert [line for line in said if "trying again in 1.0 s" in line], said   # the retry logged
    unknown = started("nosuch://x")
    assert last_line_only_error(unknown, 2) == (
        f"fornace {command}: the database nosuch://x is no database Fornace can use: "
        "Can't load plugin: sqlalchemy.dialects:nosuch")


def test_conductor_on_a_database_url_that_cannot_work(tmp_path):
    """Refused at start (exit 2, one line); a database out of reach is not:
    the conductor waits for it job by job (tests/system/test_pg_failover.py)."""
    config = tmp_path / "fornace.conf"
    config.write_text("[database]\nconnection = nosuch://x\n")
    done = run_daemon("conductor", "--config-file", str(config))
    assert last_line_only_error(done, 2) == (
        "fornace conductor: the database nosuch://x is no database Fornace can use: "
        "Can't load plugin: sqlalchemy.dialects:nosuch")


@pytest.mark.parametrize("args, said", [
    (["api", "--port", "99999"], "argument --port: 99999 is not a port (0 to 65535)"),
    (["up", "--port", "-1"], "argument --port: -1 is not a port (0 to 65535)"),
    (["api", "--workers", "0"], "argument --workers: 0 is not a count of at least 1"),
    (["conductor", "--max-environments", "two"],
     "argument --max-environments: 'two' is not a whole number"),
])
def test_daemon_numbers_out_of_range_are_usage_errors(args, said):
    done = run_daemon(*args)
    assert last_line_only_error(done, 2) == f"fornace {args[0]}: error: {said}"


@pytest.mark.parametrize("args, said", [
    (["--log-file", "x.log", "gc"], "--log-file is an option of the daemons only "
                                    "(up, api, conductor, agent, demo), not of 'gc'"),
    (["--debug", "env", "list"], "--debug is an option of the daemons only "
                                 "(up, api, conductor, agent, demo), not of 'env'"),
    (["--debug"], "--debug is an option of the daemons only "
                  "(up, api, conductor, agent, demo): fornace --debug DAEMON"),
])
def test_log_options_before_a_command_that_is_no_daemon(args, said, capsys):
    """Not argparse's 'invalid choice: x.log' (the option's value read as the command)."""
    assert main(args) == 2
    assert capsys.readouterr().err.strip() == f"fornace: {said}"


def test_a_bad_value_in_the_configuration_file(tmp_path):
    """oslo.config reads a value when it is first used, after the command line
    was parsed: still one line naming the option and the file, exit 2."""
    config = tmp_path / "fornace.conf"
    config.write_text("[conductor]\nmax_environments = many\n")
    done = run_daemon("conductor", "--config-file", str(config))
    assert last_line_only_error(done, 2) == (
        f"fornace conductor: the value of option max_environments in {config} is not valid: "
        "invalid literal for int() with base 10: 'many'")
