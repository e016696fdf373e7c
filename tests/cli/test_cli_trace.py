"""``fornace trace``: a real deployment on the local cloud, through the API, and
the trace of the rules that fired, as the API serves it and as the CLI prints it."""
from __future__ import annotations

import json
import re

from apikit import free_port
from clikit import as_json, ok, one_line_error, site
from fornace.cli.client.http import ApiClient
from fornace.cli.client.trace import trace_lines


def test_a_real_deployment_keeps_the_trace_of_the_rules_that_fired(box, cli, tmp_path):
    ok(cli("env", "create", "traced"))
    model = tmp_path / "web.json"
    model.write_text(json.dumps(site("web", free_port())))
    ok(cli("service", "add", "traced", "--file", str(model)))
    ok(cli("deploy", "traced"))

    client = ApiClient(box.url)
    env = next(e for e in client.get("/environments")["environments"] if e["name"] == "traced")
    job = client.get(f"/environments/{env['id']}/jobs")["jobs"][0]
    document = client.get(f"/environments/{env['id']}/jobs/{job['id']}/trace")
    assert (document["job_id"], document["action"], document["state"]) == (
        job["id"], "deploy", "success")
    events = [e for r in document["rounds"] for e in r["events"]]
    rules = [e for e in events if e["e"] == "rule"]
    # the workflow rules that fired, where they are, and on which object
    assert any(re.fullmatch(r".+\.xml:\d+", e["at"]) and "units" in e["object"] for e in rules)
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
    assert re.search(r"queued #\d+ send-command Linux/DeployStaticSite on unit", printed)
    assert as_json(cli("trace", "traced", job["id"], "--json")) == document

    ok(cli("action", "traced", "check"))   # an action keeps a trace too (its reports)
    checked = as_json(cli("trace", "traced", "--json"))
    assert checked["action"] == "check" and checked["job_id"] != job["id"]
    assert "not found" in one_line_error(cli("trace", "traced", "nope"), 2)
    ok(cli("env", "delete", "traced", "-y"))
