"""``fornace trace``: a real deployment on the local cloud, through the API, and
the trace of the rules that fired, as the API serves it and as the CLI prints it;
``fornace why``: a rule of that deployment explained on the model it left."""
from __future__ import annotations

import json
import re

import pytest

from apikit import free_port
from clikit import as_json, ok, one_line_error, runner, site
from fornace.cli.client.http import ApiClient
from fornace.cli.client.trace import trace_lines


@pytest.fixture(scope="module")
def traced(box, tmp_path_factory):
    """The environment ``traced``, deployed once on the local cloud, and its job."""
    cli = runner(box.url, tmp_path_factory.mktemp("traced"))
    ok(cli("env", "create", "traced"))
    model = tmp_path_factory.mktemp("model") / "web.json"
    model.write_text(json.dumps(site("web", free_port())))
    ok(cli("service", "add", "traced", "--file", str(model)))
    ok(cli("deploy", "traced"))
    client = ApiClient(box.url)
    env = next(e for e in client.get("/environments")["environments"] if e["name"] == "traced")
    yield env, client.get(f"/environments/{env['id']}/jobs")["jobs"][0]
    ok(cli("env", "delete", "traced", "-y"))


def test_a_real_deployment_keeps_the_trace_of_the_rules_that_fired(box, cli, traced):
    client = ApiClient(box.url)
    env, job = traced
    document = client.get(f"/environments/{env['id']}/jobs/{job['id']}/trace")
    assert (document["job_id"], document["action"], document["state"]) == (
        job["id"], "deploy", "success")
    events = [e for r in document["rounds"] for e in r["events"]]
    rules = [e for e in events if e["e"] == "rule"]
    # the workflow rules that fired, where they are, and on which object
    assert any(re.fullmatch(r".+\.xml:\d+", e["at"]) and "units" in e["object"] for e in rules)
    # units by hostname too, and why a rule matched: the values its filter read
    created = [e for e in rules if e["at"] == "Common.xml:37"]
    assert created and all(e["host"] == "web1" for e in created)
    assert created[0]["cause"] == ["services.0.temp.instance.image: 'linux'",
                                   "state.hostname: 'web1'", "temp.instanceName: absent"]
    commands = {e["n"]: e for e in events if e["e"] == "queued" and e["kind"] == "send-command"}
    assert any(e.get("template") == "Linux/DeployStaticSite" for e in commands.values())
    tasks = {t["change_id"] for t in client.get(
        f"/environments/{env['id']}/jobs/{job['id']}")["tasks"]}
    linked = [e for e in events if e["e"] == "task" and e["n"] in commands]
    assert linked and {e["change"] for e in linked} <= tasks      # task -> its rule
    assert {e["outcome"] for e in events if e["e"] == "ended"} == {"success"}

    printed = ok(cli("trace", "traced"))          # the newest job: this deployment
    assert printed.splitlines() == trace_lines(document)
    assert re.search(r"^== round 1$", printed, re.M)
    assert re.search(r"^  pass 1: rule \S+ at \S+\.xml:\d+ matched \S+", printed, re.M), printed
    assert re.search(r"queued #\d+ send-command Linux/DeployStaticSite on unit \S+ \(web1\)",
                     printed)
    assert re.search(r"^  pass \d: rule line37 at Common.xml:37 matched services.0.units.0 "
                     r"\(\w+, host web1\)  -- Linux units .*\n      because services.0.temp.instance.image: "
                     r"'linux', state.hostname: 'web1', temp.instanceName: absent$",
                     printed, re.M)
    assert as_json(cli("trace", "traced", job["id"], "--json")) == document

    ok(cli("action", "traced", "check"))   # an action keeps a trace too (its reports)
    checked = as_json(cli("trace", "traced", "--json"))
    assert checked["action"] == "check" and checked["job_id"] != job["id"]
    assert "not found" in one_line_error(cli("trace", "traced", "nope"), 2)


def test_why_answers_for_a_rule_that_fired_and_one_that_did_not(box, cli, traced):
    """On the model the deployment left: the rule that named the unit fired then and
    does not match now (the unit has its hostname), naming the clause; the rule that
    creates the stack's instance matches on every deployment, and says what it does."""
    env, _ = traced
    model = ApiClient(box.url).get(f"/environments/{env['id']}/model")
    unit_id = model["services"][0]["units"][0]["id"]
    printed = ok(cli("why", "traced", "Units that have no hostname yet", "web1"))
    assert printed.splitlines() == [
        "rule line5 at Common.xml:5  -- Units that have no hostname yet",
        "  match: $.services[*].units[?(not @.state.hostname)]",
        "on the model the next deployment starts from: matches 0 of 1 object(s) its "
        "match reaches",
        f"  services.0.units.0 ({unit_id}, host web1): does not match",
        "      failed: [?(not @.state.hostname)] of rule line5",
        "        not @.state.hostname is false: state.hostname = 'web1'"]
    answer = as_json(cli("why", "traced", "Common.xml:37", "--json"))
    [unit] = answer["objects"]
    assert (unit["host"], unit["matched"], answer["matched"]) == ("web1", True, 1)
    assert unit["because"] == ["services.0: @.temp.instance.image == 'linux' is true: "
                              "temp.instance.image = 'linux'",
                              "@.state.hostname is true: state.hostname = 'web1'",
                              "not @.temp.instanceName is true: temp.instanceName = absent"]
    assert answer["does"][0] == "update-cf-stack template=(select ::temp.instance.template)"
    error = one_line_error(cli("why", "traced", "LinuxWebServer.xml:68", "web1x"), 2)
    assert "no unit has the id, hostname or name 'web1x'; close names: 'web1'" in error
    error = one_line_error(cli("why", "traced", "Units that have no hostnam"), 2)
    assert "no rule is named 'Units that have no hostnam'" in error
    assert "close names: 'Units that have no hostname yet'" in error
    error = one_line_error(cli("why", "traced", "Common.xml:5", "web9"), 2)
    assert "no unit has the id, hostname or name 'web9'; close names: 'web1'" in error

