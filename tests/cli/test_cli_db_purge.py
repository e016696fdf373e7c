"""``fornace db purge`` after a real deployment on the local cloud: the old jobs
go, and what the environment shows -- ``fornace status``, its deployments and
the reports of its last deployment -- and what its next deployment needs
(change detection) stay."""
from __future__ import annotations

import datetime
import json
import re

from sqlalchemy import update

from apikit import free_port
from clikit import as_json, ok, site
from fornace.cli.client.http import ApiClient
from fornace.cli.main import main
from fornace.common.db.engine import make_engine
from fornace.common.db.models import Job, utcnow


def test_purge_keeps_what_status_deployments_and_change_detection_need(box, cli, tmp_path,
                                                                       capsys):
    ok(cli("env", "create", "purged"))
    model = tmp_path / "web.json"
    model.write_text(json.dumps(site("web", free_port())))
    ok(cli("service", "add", "purged", "--file", str(model)))
    ok(cli("deploy", "purged"))
    ok(cli("action", "purged", "check"))
    ok(cli("action", "purged", "check"))
    client = ApiClient(box.url)
    env = next(e for e in client.get("/environments")["environments"] if e["name"] == "purged")
    latest, older, deployment = [j["id"] for j in as_json(cli("jobs", "purged", "--json"))["jobs"]]

    url = f"sqlite:///{box.state_dir / 'fornace.sqlite'}"
    engine = make_engine(url)
    long_ago = utcnow() - datetime.timedelta(days=40)
    with engine.begin() as db:   # the three jobs ended 40 days ago, in their order
        for minute, job in enumerate([deployment, older, latest]):
            when = long_ago + datetime.timedelta(minutes=minute)
            db.execute(update(Job).where(Job.id == job).values(started=when, finished=when))
    engine.dispose()
    status = as_json(cli("status", "purged", "--json"))

    capsys.readouterr()
    assert main(["db", "purge", "--older-than", "30", "--db", url]) == 0
    assert re.search(r"^  deployments +1  jobs$", capsys.readouterr().out, re.M)

    assert [j["id"] for j in as_json(cli("jobs", "purged", "--json"))["jobs"]] == [
        latest, deployment]
    assert as_json(cli("status", "purged", "--json")) == status
    listed = as_json(cli("deployments", "purged", "--json"))["deployments"]
    assert [d["id"] for d in listed] == [latest, deployment]
    assert "Service web is ready" in ok(cli("deployments", "purged", deployment))
    # change detection: nothing to do, then a changed field reconfigures the unit
    assert "would run 0 agent command(s)" in ok(cli("plan", "purged"))
    ok(cli("service", "update", "purged", "web", "--set", f"port={free_port()}"))
    planned = ok(cli("plan", "purged"))
    assert re.search(r"^web1\s+Linux/DeployStaticSite\s+\S+\s+planned", planned, re.M), planned
    ok(cli("env", "delete", "purged", "-y"))
    assert env["id"] not in {e["id"] for e in client.get("/environments")["environments"]}
