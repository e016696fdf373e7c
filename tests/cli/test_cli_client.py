"""The client commands (``fornace env``, ``service``, ``deploy``, ``action``...)
run as their users run them: ``python -m fornace.cli`` in a subprocess,
talking over HTTP to a real API with its conductor and the local cloud's
real agents (folder broker, SQLite), started once for the module (the
``box`` and ``cli`` fixtures of conftest.py).
"""
from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import pytest

from apikit import free_port
from clikit import as_json, dashboard_page, ok, one_line_error, site
from fornace.cli.client.deploy import with_ids
from fornace.cli.client.http import ApiClient
from fornace.cli.client.service import load_services
from fornace.cli.main import COMMANDS, GROUPS, main
from fornace.common.errors import FornaceError
from waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "data" / "examples" / "apps" / "hello"


# --------------------------------------------------------------------------------- help

def test_help_groups_every_command_and_explains_the_exit_codes(capsys):
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: fornace")
    grouped = [name for _, names in GROUPS for name in names]
    assert sorted(grouped) == sorted(COMMANDS)
    for title, names in GROUPS:
        assert f"\n{title}:\n" in text
        for name in names:
            assert re.search(rf"^  {name} +\S", text, re.M), name
    for code in ("0", "1", "2", "3"):
        assert re.search(rf"^  {code} +\S", text, re.M)
    assert main([]) == 2 and "COMMAND" in capsys.readouterr().err


@pytest.mark.parametrize("args", [
    ["env"], ["env", "list"], ["env", "create"], ["env", "show"], ["env", "delete"],
    ["service"], ["service", "add"], ["service", "update"], ["service", "list"],
    ["service", "remove"], ["deploy"], ["action"], ["plan"], ["jobs"], ["logs"],
    ["deployments"], ["trace"], ["why"], ["status"], ["topology"], ["outputs"]])
def test_each_client_command_has_a_description_and_examples(capsys, args):
    with pytest.raises(SystemExit) as done:
        main([*args, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    usage, description = text.split("\n\n")[:2]
    assert usage.startswith(f"usage: fornace {' '.join(args)}")
    assert len(description.split()) > 8, text
    assert f"\nexamples:\n  fornace {args[0]}" in text
    if len(args) > 1 or args[0] not in ("env", "service"):
        assert "--url URL" in text and "--json" in text


# ----------------------------------------------------------------------- pure helpers

def test_service_files_take_a_service_a_list_or_an_environment_model(tmp_path):
    one = tmp_path / "one.json"
    one.write_text(json.dumps(site("a", 1)))
    many = tmp_path / "many.yaml"
    many.write_text("- {name: a, type: linuxWebServer, units: [{}]}\n"
                    "- {name: b, type: linuxWebServer, units: [{}]}\n")
    assert [s["name"] for s in load_services(str(one))] == ["a"]
    assert [s["name"] for s in load_services(str(many))] == ["a", "b"]
    assert [s["name"] for s in load_services(str(ROOT / "data/examples/linux-web.json"))] \
        == ["site"]


@pytest.mark.parametrize("name, text, message", [
    ("deep.json", "[" * 100000 + "]" * 100000, "nested deeper than"),
    ("deep.yaml", "[" * 100000 + "]" * 100000, "YAML nested too deeply"),
    ("big.json", '{"port": ' + "9" * 5000 + "}", "integer of 5000 digits"),
    ("bomb.yaml", "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n"
        for i in range(8)) + "name: w\nbomb: *i\n", "once its YAML aliases are expanded"),
])
def test_service_files_over_the_limits_are_clear_errors(tmp_path, name, text, message):
    """Regression: such files ended in a RecursionError or ValueError traceback."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(FornaceError) as error:
        load_services(str(path))
    assert message in str(error.value) and name in str(error.value)


def test_action_parameters_may_name_services_and_units():
    services = [{"id": "s1", "name": "web", "units": [
        {"id": "u1", "name": "web_instance_0", "state": {"hostname": "web1"}},
        {"id": "u2", "name": "web_instance_1", "state": {"hostname": "web2"}}]}]
    assert with_ids({"node_id": "web", "delta": 1}, services) == {"node_id": "s1", "delta": 1}
    assert with_ids({"node_instance_ids": ["web2", "web_instance_0", "u9"]}, services) == {
        "node_instance_ids": ["u2", "u1", "u9"]}    # unknown: left for the API to refuse


# ------------------------------------------------------------------------------ errors

def test_an_unreachable_api_is_one_line_and_exit_3(cli):
    done = cli("--url", f"http://127.0.0.1:{free_port()}", "env", "list")
    line = one_line_error(done, 3)
    assert "cannot reach" in line and done.stdout == ""


def test_environments_are_created_listed_shown_and_deleted(cli):
    created = as_json(cli("env", "create", "cli-empty", "--json"))
    assert created["name"] == "cli-empty" and created["status"] == "ready"
    listing = ok(cli("env", "list"))
    assert re.search(rf"^{created['id']}\s+cli-empty\s+ready\s+0", listing, re.M)
    listed = as_json(cli("env", "list", "--json"))
    assert created["id"] in [e["id"] for e in listed["environments"]]
    assert "environment cli-empty" in ok(cli("env", "show", "cli-empty"))
    assert as_json(cli("env", "show", created["id"], "--json"))["id"] == created["id"]

    line = one_line_error(cli("env", "show", "no-such-env"), 2)
    assert "'no-such-env'" in line

    assert "deleted" in ok(cli("env", "delete", "cli-empty", "--yes"))
    assert created["id"] not in ok(cli("env", "list"))


def test_a_list_of_services_is_added_all_or_nothing(cli, tmp_path):
    ok(cli("env", "create", "cli-list"))
    good, bad = site("good", free_port()), site("bad", free_port())
    bad["units"] = [{"isMaster": "yes"}]
    listed = tmp_path / "services.json"
    listed.write_text(json.dumps([good, bad]))
    line = one_line_error(cli("service", "add", "cli-list", "--file", str(listed)), 2)
    assert "services[1].units[0].isMaster" in line, line
    assert as_json(cli("service", "list", "cli-list", "--json")) == []   # not even "good"
    bad["units"] = [{}]
    listed.write_text(json.dumps([good, bad]))
    added = ok(cli("service", "add", "cli-list", "--file", str(listed)))
    assert "added service good" in added and "added service bad" in added
    assert sorted(s["name"] for s in as_json(cli("service", "list", "cli-list", "--json"))) \
        == ["bad", "good"]
    ok(cli("env", "delete", "cli-list", "--yes"))


# ------------------------------------------------ a deployment, its jobs and actions

def test_services_are_added_deployed_followed_and_acted_on(cli, tmp_path):
    port = free_port()
    ok(cli("env", "create", "cli-web"))
    model = tmp_path / "web.json"     # an environment model, as data/examples has
    model.write_text(json.dumps({"name": "ignored", "services": [site("web", port)]}))
    added = ok(cli("service", "add", "cli-web", "--file", str(model)))
    assert "added service web (linuxWebServer, 1 unit(s)" in added
    ok(cli("service", "add", "cli-web", "--type", "linuxWebServer", "--name", "spare",
           "--set", f"port={free_port()}", "--set", "osImage.name=local"))
    pending = ok(cli("service", "list", "cli-web"))
    assert "pending changes" in pending and "spare" in pending and "web_instance_0" in pending
    ok(cli("service", "remove", "cli-web", "spare", "--yes"))
    assert [s["name"] for s in as_json(cli("service", "list", "cli-web", "--json"))] == ["web"]

    deployed = cli("deploy", "cli-web")
    out = ok(deployed)
    assert re.search(r"^\[\d+/\d+\] web1 +Linux/DeployStaticSite +ok$", out, re.M), out
    assert "report: Service web is ready" in out
    ending = re.search(r"^deploy succeeded: job (\w+) in (\d+) s, tasks: \d+ ok$", out, re.M)
    assert ending, out
    counters = re.findall(r"^\[(\d+)/\d+\] ", out, re.M)    # one count per ended task
    assert counters == [str(n) for n in range(1, len(counters) + 1)], out
    job = as_json(cli("jobs", "cli-web", ending.group(1), "--json"))
    took = (datetime.datetime.fromisoformat(job["finished"])
            - datetime.datetime.fromisoformat(job["started"])).total_seconds()
    assert int(ending.group(2)) == round(took), (out, job["started"], job["finished"])
    shown = as_json(cli("env", "show", "cli-web", "--json"))
    assert shown["status"] == "ready" and shown["version"] == 1
    assert [u["state"]["hostname"] for u in shown["services"][0]["units"]] == ["web1"]

    checked = ok(cli("action", "cli-web", "check"))
    assert re.search(r"web1 +check \(Linux/CheckServer\) +ok", checked), checked
    scaled = cli("action", "cli-web", "scale", "--param", "node_id=web", "--param", "delta=1",
                 "--json")
    outcome = as_json(scaled)
    assert outcome["job"]["action"] == "scale" and outcome["job"]["state"] == "success"
    assert ("web2", "ok") in [(t["target_name"], t["status"]) for t in outcome["job"]["tasks"]]
    assert any(r["text"] == "Service web is ready" for r in outcome["reports"])

    plan = ok(cli("plan", "cli-web"))
    assert plan.splitlines()[0].split() == ["TARGET", "OPERATION", "REASON", "STATUS"]
    assert "planned" in plan

    jobs = as_json(cli("jobs", "cli-web", "--json"))["jobs"]
    assert [j["action"] for j in jobs] == ["plan", "scale", "check", "deploy"]
    listing = ok(cli("jobs", "cli-web"))
    assert re.search(rf"^{jobs[3]['id']}\s+deploy\s+success\s+\d+ ok", listing, re.M)
    tasks = ok(cli("jobs", "cli-web", jobs[3]["id"]))
    assert re.search(r"^web1\s+Linux/DeployStaticSite\s+new\s+ok", tasks, re.M), tasks
    logs = ok(cli("logs", "cli-web", jobs[3]["id"]))   # the job as jobs and trace take it
    assert ok(cli("logs", "cli-web", "--job", jobs[3]["id"])) == logs   # as it was
    assert re.search(r"^web1 Linux/DeployStaticSite \| serving http://", logs, re.M), logs
    assert "report: Deploying the web site on web1" in logs
    assert len(as_json(cli("deployments", "cli-web", "--json"))["deployments"]) == 4
    assert "Service web is ready" in ok(cli("deployments", "cli-web", jobs[3]["id"]))
    status = as_json(cli("status", "cli-web", "--json"))
    assert [u["status"]["local"] for u in status["services"][0]["units"]] == ["ok", "ok"]
    assert as_json(cli("topology", "cli-web", "--json"))["levels"]

    # parameters the command or the API refuses: one line, exit 2
    assert "expected KEY=VALUE" in one_line_error(
        cli("action", "cli-web", "scale", "--param", "delta"), 2)
    assert "must be an integer" in one_line_error(
        cli("action", "cli-web", "scale", "--param", "node_id=web", "--param", "delta=x"), 2)
    assert "--params" in one_line_error(cli("action", "cli-web", "scale", "--params", "[1"), 2)
    assert cli("action", "cli-web", "reboot").returncode == 2

    # plan takes the changes waiting in the client's session into account
    ok(cli("service", "add", "cli-web", "--type", "linuxWebServer", "--name", "blog",
           "--set", f"port={free_port()}", "--set", "osImage.name=local",
           "--set", "unitNamingPattern=blog#"))
    planned = ok(cli("plan", "cli-web"))
    assert re.search(r"^blog1\s+Linux/DeployStaticSite\s+new\s+planned", planned, re.M), planned
    assert not re.search(r"^web\d\s+Linux/DeployStaticSite", planned, re.M), planned

    deleted = ok(cli("env", "delete", "cli-web", "-y"))
    assert "environment cli-web deleted" in deleted
    assert "cli-web" not in ok(cli("env", "list"))


def test_a_first_deployment_shows_its_units_as_it_goes_and_is_busy_for_changes(box, cli,
                                                                             tmp_path):
    """A job held in its app's start (the app waits for a file): the unit's
    hostname and address show while it runs, its services are found (busy, not
    "no service"), and the app's URL is the app's, not its health URL."""
    go, port = tmp_path / "go", free_port()
    ok(cli("env", "create", "cli-held"))
    ok(cli("service", "add", "cli-held", "--type", "linuxApp", "--name", "held",
           "--set", f"source={HELLO}", "--set", f"port={port}", "--set", "healthPath=/health",
           "--set", f"startCommand=while [ ! -e {go} ]; do sleep 0.05; done; exec python3 app.py",
           "--set", "unitNamingPattern=held#", "--set", "osImage.name=local",
           "--set", "osImage.type=linux"))
    job = as_json(cli("deploy", "cli-held", "--no-follow", "--json"))
    env_id = as_json(cli("env", "show", "cli-held", "--json"))["id"]
    api = ApiClient(box.url)

    def addressed():
        status = api.get(f"/environments/{env_id}/status")
        unit = status["services"][0]["units"][0]
        return unit if unit["address"] and status["job"] == job["id"] else None
    try:
        unit = wait_for(addressed, "the unit's address while the job runs", timeout=120)
        assert unit["hostname"] == "held1"
        assert unit["status"]["state"] in ("created", "configuring")
        assert set(unit["status"]) == {"local", "state"}          # no bookkeeping
        outputs = as_json(cli("outputs", "cli-held", "--json"))
        assert outputs["job"] == job["id"]
        assert outputs["services"][0]["units"][0]["address"] == unit["address"]
        assert re.search(rf"^held\s+-\s+held_instance_0\s+\S+\s+\S+\s+held1\s+"
                         rf"{re.escape(unit['address'])}$", ok(cli("status", "cli-held")), re.M)
        busy = one_line_error(cli("service", "update", "cli-held", "held", "--set", "port=1"), 3)
        assert f"is busy: job {job['id']} (deploy)" in busy
        assert "held_instance_0" in ok(cli("service", "list", "cli-held"))
        page = dashboard_page(box.url, f"/environments/{env_id}")     # the dashboard too
        [row] = re.findall(rf'<tr class="unit-row" data-unit="{unit["id"]}">(.*?)</tr>', page,
                           re.S)
        assert "<td>held1</td>" in row and f"<td>{unit['address']}</td>" in row, row
        assert re.search(rf'<tr class="output-unit" data-unit="{unit["id"]}">.*?<td>held1</td>'
                         rf'\s*<td>{re.escape(unit["address"])}</td>', page, re.S), page
    finally:
        go.write_text("")   # the app starts: the job ends
    assert "deploy succeeded" in ok(cli("logs", "cli-held", job["id"], "--follow"))
    done = as_json(cli("outputs", "cli-held", "--json"))["services"][0]["units"][0]
    assert done["url"] == f"http://{unit['address']}:{port}/"      # the app's, not /health
    ok(cli("env", "delete", "cli-held", "--yes"))


def test_a_failing_deployment_exits_1_with_the_error(cli, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text(f"name: broken\ntype: linuxApp\nosImage: local\nsource: {HELLO}\n"
                      f"startCommand: 'echo missing-dependency >&2; exit 7'\n"
                      f"port: {free_port()}\nunits: [{{}}]\n")
    ok(cli("env", "create", "cli-broken"))
    done = cli("deploy", "cli-broken", "--service", str(broken))
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"Linux/DeployApp +error: .*exited with code", done.stdout), done.stdout
    assert "error: Deployment of broken on" in done.stdout
    assert re.search(r"^deploy FAILED \(completed_w_errors\)", done.stdout, re.M)

    again = cli("deploy", "cli-broken", "--json")      # the next deployment retries it
    assert again.returncode == 1
    outcome = json.loads(again.stdout)
    assert outcome["job"]["state"] == "completed_w_errors"
    assert any(r["level"] == "error" for r in outcome["reports"])
    assert ok(cli("env", "delete", "cli-broken", "--yes"))
