"""``fornace workflow simulate --environment``: a real deployment on the local
cloud, through the CLI, then the workflows of a data folder replayed on the
model that deployment was given and compared with its trace -- unchanged,
then edited."""
from __future__ import annotations

import inspect
import json
import re
import shutil
from pathlib import Path

import pytest

from apikit import free_port
from clikit import as_json, ok, one_line_error, site
from fornace.cli.client.http import ApiClient
from fornace.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "Sekr3t-pass-42"
# the rule of LinuxWebServer.xml that deploys the site on each unit
DEPLOY_RULE = re.compile(r'\n    <rule match="[^"]*not @\.state\.siteDeployed and not '
                         r'@\.state\.failed\)\]"\n.*?\n    </rule>\n', re.S)


def test_the_model_routes_check_their_documented_rules():
    """Each route of the model checks the rule whose documented operations
    name it: reading (the model, a path in it) for readers, a patch for writers."""
    from fornace.api import modelroutes, policy

    checked = {}
    for route in modelroutes.router.routes:
        (check,) = [d.call for d in route.dependant.dependencies
                    if d.call.__name__ == "permitted_caller"]
        (method,) = route.methods
        path = route.path.replace("{path:path}", "{path}")
        checked[(method, path)] = inspect.getclosurevars(check).nonlocals["action"]
    documented = {(operation["method"], operation["path"]): rule.name
                  for rule in policy.API_RULES if rule.name.startswith("environment:model")
                  for operation in rule.operations}
    assert checked == documented
    assert set(checked.values()) == {"environment:model", "environment:model_edit"}
    assert {r.name: r.check_str for r in policy.API_RULES
            if r.name in checked.values()} == {"environment:model": "rule:reader",
                                               "environment:model_edit": "rule:writer"}


@pytest.mark.parametrize("args, message", [
    (["--model", str(ROOT / "data/examples/linux-web.json"), "--job", "j"],
     "--job JOB goes with --environment ENV"),
    (["--environment", "e", "--show-secrets"], "--show-secrets: the API masks"),
    (["--environment", "e", "--data", "/nonexistent"], "workflow folder not found: /nonexistent/workflows"),
])
def test_bad_usage_is_said_before_any_request(capsys, args, message):
    assert main(["workflow", "simulate", "--url", "http://127.0.0.1:9", *args]) == 2
    assert message in capsys.readouterr().err


def _edited(tmp_path: Path, name: str, edit) -> Path:
    """A copy of the repository's data folder with LinuxWebServer.xml edited."""
    data = tmp_path / name
    shutil.copytree(ROOT / "data", data)
    workflow = data / "workflows" / "LinuxWebServer.xml"
    workflow.write_text(edit(workflow.read_text()))
    return data


def test_simulate_an_environment_with_unchanged_and_edited_workflows(box, cli, tmp_path):
    ok(cli("env", "create", "whatif"))
    done = cli("workflow", "simulate", "--environment", "whatif")
    assert "has no deploy job yet" in one_line_error(done, 2)
    assert "no environment is named" in one_line_error(
        cli("workflow", "simulate", "--environment", "nowhere"), 2)

    service = {**site("web", free_port()), "adminPassword": PASSWORD}
    (tmp_path / "web.json").write_text(json.dumps(service))
    ok(cli("service", "add", "whatif", "--file", str(tmp_path / "web.json")))
    ok(cli("deploy", "whatif"))

    # the model a deployment is given, through the API: secrets masked
    client = ApiClient(box.url)
    env = next(e for e in client.get("/environments")["environments"]
               if e["name"] == "whatif")
    job = client.get(f"/environments/{env['id']}/jobs")["jobs"][0]
    given = client.get(f"/environments/{env['id']}/model?job={job['id']}")
    current = client.get(f"/environments/{env['id']}/model")
    assert given["services"][0]["adminPassword"] == "***"
    assert current["services"][0]["adminPassword"] == "***"
    assert "state" not in given["services"][0]["units"][0]         # before the job ran
    assert current["services"][0]["units"][0]["state"]["siteDeployed"] is True
    assert PASSWORD not in json.dumps([given, current])
    session = client.post(f"/environments/{env['id']}/configure")["id"]
    assert client.get(f"/environments/{env['id']}/model", session=session) == current
    client.delete(f"/environments/{env['id']}/sessions/{session}")
    assert "not found" in one_line_error(
        cli("workflow", "simulate", "--environment", "whatif", "--job", "f" * 32), 2)

    # the same workflows: the deployment they would run is the one that ran
    printed = ok(cli("workflow", "simulate", "--environment", "whatif"))
    folder = ROOT / "data" / "workflows"
    assert printed.splitlines() == [f"no differences (workflows of {folder}, compared with "
                                    f"job {job['id']}: deploy success, started "
                                    f"{job['started']})"]
    ok(cli("action", "whatif", "check"))          # the newest job, but it runs no workflows
    nothing = as_json(cli("workflow", "simulate", "--environment", "whatif", "--json"))
    assert nothing == {"added": [], "removed": [], "changed": [], "rules_added": [],
                       "rules_removed": []}
    check = client.get(f"/environments/{env['id']}/jobs")["jobs"][0]
    assert check["action"] == "check"
    assert "is a check job" in one_line_error(
        cli("workflow", "simulate", "--environment", "whatif", "--job", check["id"]), 2)

    # without the rule that deploys the site: its command is removed
    without = _edited(tmp_path, "without", lambda text: DEPLOY_RULE.sub("\n", text, count=1))
    done = cli("workflow", "simulate", "--environment", "whatif", "--data", str(without))
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert ("- send-command Linux/DeployStaticSite on unit web_instance_0 (rule 'line33' at "
            "LinuxWebServer.xml:39)") in lines
    assert "- rule 'line33' at LinuxWebServer.xml:33 on services.0.units.0" in done.stdout
    assert re.match(r"0 action\(s\) added, 1 removed, 0 changed; \d+ rule firing\(s\) added, "
                    r"\d+ removed \(workflows of .*without", lines[-1]), lines[-1]
    assert PASSWORD not in done.stdout + done.stderr

    # the rule two lines further down: the same command, queued from elsewhere
    moved = _edited(tmp_path, "moved", lambda text: text.replace(
        "<workflow>\n", "<workflow>\n    <!-- edited -->\n    <!-- twice -->\n", 1))
    done = cli("workflow", "simulate", "--environment", "whatif", "--data", str(moved),
               "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    diff = json.loads(done.stdout)
    assert diff["added"] == diff["removed"] == []
    command = next(c for c in diff["changed"] if c["template"] == "Linux/DeployStaticSite")
    unit = given["services"][0]["units"][0]["id"]
    assert command == {"kind": "send-command", "template": "Linux/DeployStaticSite",
                       "unit": unit,
                       "before": {"rule": "line33", "at": "LinuxWebServer.xml:39",
                                  "outcome": "success"},
                       "after": {"rule": "line35", "at": "LinuxWebServer.xml:41",
                                 "outcome": "success"}}
    assert {r["rule"] for r in diff["rules_removed"]} >= {"line33"}
    assert {r["rule"] for r in diff["rules_added"]} >= {"line35"}
    ok(cli("env", "delete", "whatif", "-y"))
