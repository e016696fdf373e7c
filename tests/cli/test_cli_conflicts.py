"""What the client commands say when the API refuses: in their own words (no
``POST /environments/…:`` prefix, no ``abandon=true``), with the exit code
``fornace --help`` gives -- 2 for what the API finds wrong (400, 404, a taken name's 409), 3
for refusals (401, 403, a busy environment's 409), failures (5xx) and no answer.

``fornace api`` runs alone, without a conductor: a job it starts never ends,
so the environment stays busy for as long as the test needs.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from types import SimpleNamespace

import pytest

from apikit import free_port
from clikit import ok, one_line_error, runner, site
from fornace.cli.client.common import error_text, exit_code
from fornace.cli.client.http import ClientError
from waiting import wait_for


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/environments", timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def api_url(tmp_path_factory):
    """``fornace api`` on SQLite and its in-process broker: nothing runs the jobs."""
    home = tmp_path_factory.mktemp("conflicts-api")
    url = f"http://127.0.0.1:{free_port()}"
    process = subprocess.Popen(
        [sys.executable, "-m", "fornace.cli", "api", "--port", url.rsplit(":", 1)[1],
         "--db", f"sqlite:///{home / 'api.sqlite'}"], cwd=home,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: _answers(url) or process.poll() is not None, "fornace api to answer",
                 timeout=60)
        assert process.poll() is None, process.stderr.read().decode()
        yield url
    finally:
        process.terminate()
        process.wait(30)


@pytest.fixture
def cli(api_url, tmp_path):
    return runner(api_url, tmp_path)


def busy_line(name: str, job_id: str) -> str:
    return (f"fornace: environment {name} is busy: job {job_id} (deploy) is running; follow "
            f"it with 'fornace logs {name} --follow', or give it up with "
            f"'fornace env abandon {name}'")


def test_every_change_of_a_busy_environment_exits_3_naming_the_job(cli, tmp_path):
    service = tmp_path / "web.json"
    service.write_text(json.dumps(site("web", free_port())))
    ok(cli("env", "create", "cli-busy"))
    job = json.loads(ok(cli("deploy", "cli-busy", "--service", str(service), "--no-follow",
                            "--json")))
    assert (job["action"], job["state"]) == ("deploy", "running")
    expected = busy_line("cli-busy", job["id"])

    for args in (["deploy", "cli-busy"],
                 ["deploy", "cli-busy", "--service", str(service)],
                 ["action", "cli-busy", "check"],
                 ["plan", "cli-busy"],
                 ["service", "add", "cli-busy", "--type", "linuxWebServer", "--name", "x"],
                 # the first deployment's services are found: busy, not "no service"
                 ["service", "update", "cli-busy", "web", "--set", "port=8081"],
                 ["service", "remove", "cli-busy", "web", "--yes"],
                 ["service", "remove", "cli-busy", "web"],   # refused before asking
                 ["env", "delete", "cli-busy", "--yes"]):
        line = one_line_error(cli(*args), 3)
        assert line == expected, (args, line)
    # what the first deployment deploys is shown while it runs
    listed = ok(cli("service", "list", "cli-busy"))
    assert listed.startswith("being deployed (the environment's first deployment;"), listed
    assert re.search(r"^web\s+linuxWebServer\s+web_instance_0\s", listed, re.M), listed
    shown = ok(cli("env", "show", "cli-busy"))
    assert "its first deployment runs: the services below are being deployed" in shown
    assert re.search(r"^web\s+linuxWebServer\s+web_instance_0\s", shown, re.M), shown
    assert [s["name"] for s in json.loads(ok(cli("env", "show", "cli-busy", "--json")))[
        "services"]] == ["web"]

    # by id too: the advice names the environment as its name
    env_id = json.loads(ok(cli("env", "show", "cli-busy", "--json")))["id"]
    assert one_line_error(cli("action", env_id, "check"), 3) == expected
    # the way out the message gives works: the job ends, the environment stays
    assert one_line_error(cli("env", "abandon", "cli-busy"), 2).endswith("pass --yes to go "
                                                                           "on without asking")
    gone = ok(cli("env", "abandon", "cli-busy", "--yes"))
    assert gone.startswith(f"job {job['id']} (deploy) of environment cli-busy abandoned")
    assert json.loads(ok(cli("env", "show", "cli-busy", "--json")))["status"] != "deploying"
    ok(cli("env", "delete", "cli-busy", "--abandon", "--yes"))
    assert "cli-busy" not in ok(cli("env", "list"))


def test_a_taken_name_and_bad_requests_exit_2_bad_ones_without_the_api_call(cli):
    created = json.loads(ok(cli("env", "create", "cli-names", "--json")))
    line = one_line_error(cli("env", "create", "cli-names"), 2)
    assert line == (f"fornace: an environment named 'cli-names' exists already "
                    f"(id {created['id']})")
    ok(cli("service", "add", "cli-names", "--type", "linuxWebServer", "--name", "web"))
    taken = one_line_error(cli("service", "add", "cli-names", "--type", "linuxWebServer",
                               "--name", "web"), 2)
    assert "a service named 'web' (id " in taken and "exists already" in taken
    wrong = one_line_error(cli("service", "add", "cli-names", "--type", "teapot",
                               "--name", "pot"), 2)
    assert wrong.startswith("fornace: type: unknown service type 'teapot'"), wrong
    for line in (taken, wrong):
        assert "/environments" not in line and "POST" not in line, line


# -- the words and codes, without a server ----------------------------------------------

def refused(status: int | None, message: str = "no", **error: object) -> ClientError:
    return ClientError(message, status, {"message": message, **error},
                       "POST /environments/0123/configure")


@pytest.mark.parametrize("status, code", [
    (400, 2), (404, 2), (413, 2), (401, 3), (403, 3), (409, 2), (429, 3), (500, 3),
    (503, 3), (None, 3)])
def test_exit_codes_follow_the_readme(status, code):
    assert exit_code(refused(status)) == code


def test_a_busy_environment_s_409_exits_3_a_taken_name_s_2():
    busy = refused(409, "environment web is busy: ...", job={"id": "6ddd", "kind": "deploy"},
                   environment={"id": "0123", "name": "web"})
    assert exit_code(busy) == 3
    assert exit_code(refused(409, "environment web is deploying; wait for it to end",
                             environment={"id": "0123", "name": "web"})) == 3
    assert exit_code(refused(409, "an environment named 'web' exists already (id 0123)",
                             existing={"id": "0123", "name": "web"})) == 2


def test_api_advice_is_put_in_the_commands_words():
    older = refused(403, "environment 0123 is deploying; wait for it to end or delete it "
                         "with abandon=true")
    text = error_text(older, SimpleNamespace(environment="my env"))
    assert "abandon=true" not in text
    assert text.endswith("delete it with 'fornace env delete 'my env' --abandon'")
    busy = refused(409, "environment my env is busy: ...", job={"id": "6ddd", "kind": "heal"},
                   environment={"id": "0123", "name": "my env"})
    assert error_text(busy) == (
        "environment my env is busy: job 6ddd (heal) is running; follow it with 'fornace logs "
        "0123 --follow', or give it up with 'fornace env abandon 0123'")
    # (a name the shell would split: the id in the commands)
    assert error_text(refused(500, "unexpected error: KeyError")) == \
        "unexpected error: KeyError (the API failed: HTTP 500)"
    unreachable = ClientError("cannot reach http://127.0.0.1:1: refused", call="GET /x")
    assert error_text(unreachable).endswith("(is Fornace running? set --url or FORNACE_URL)")
    assert "GET /x" not in error_text(unreachable)
