"""A package move whose script changed reaches every unit (the must-show of issue 32).

An environment pinned to ``kvstore 1.0.0`` -- a package holding a Linux type
``kvStore``, its configuration rule, its plan template and a script that
answers its package's version (its instances are the catalog's: the type
extends ``linuxService``) -- is deployed on the local cloud.  ``1.1.0``
changes only the script.  After ``fornace package use ENV kvstore@1.1.0``,
``fornace plan`` lists a reconfigure task per unit saying which script
changed in which version; ``deploy`` runs them, and the units answer 1.1.0.
The jobs and the trace name the versions they ran, in the command line and
in the dashboard.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from clikit import as_json, dashboard_page, ok, runner
from localkit import running_onebox
from packagekit import write_folder

KV_TYPE = {"types": {"kvStore": {
    "extends": "linuxService",
    "doc": "A store whose units answer the version of the package that deployed them.",
    "schema": {"description": "a key-value store", "required": ["type", "name", "units"],
               "properties": {"units": {"minItems": 1, "maxItems": 3}}}}}}

WORKFLOW = """<?xml version="1.0"?>
<workflow>
    <rule match="$.services[?(@.type == 'kvStore')].units[?(@.temp.instanceName and not @.state.kvDeployed)]"
          desc="kvStore units whose store is not deployed">
        <send-command template="Kv/Deploy" error="exception" result="outcome">
            <parameter name="service"><select path="::id"/></parameter>
            <parameter name="unit"><select path="id"/></parameter>
            <parameter name="mappings"><map><mapping name="name"><select path="name"/></mapping></map></parameter>
            <success>
                <set path="state.kvDeployed"><true/></set>
                <set path="state.kvVersion"><select source="outcome" path="0.Result.0"/></set>
            </success>
        </send-command>
    </rule>
</workflow>
"""

PLAN = {"FormatVersion": "2.0", "Scripts": ["deploy_kv.py"],
        "Commands": [{"Name": "deploy_kv.py", "Arguments": {"name": "$name"}}],
        "RebootOnCompletion": 0}

SCRIPT = 'print("kvstore {version}")\n'


def kvstore(root: Path, version: str) -> Path:
    return write_folder(root / f"kvstore-{version}", {
        "package.json": json.dumps({"name": "kvstore", "version": version,
                                    "description": "a store answering its version"}).encode(),
        "types.json": json.dumps(KV_TYPE).encode(),
        "workflows/Kv.xml": WORKFLOW.encode(),
        "templates/agent/Kv/Deploy.template": json.dumps(PLAN).encode(),
        "templates/agent/scripts/deploy_kv.py": SCRIPT.format(version=version).encode()})


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    yield from running_onebox(tmp_path_factory.mktemp("kv-move") / "state", max_environments=1)


def versions(cli) -> list[str]:
    shown = as_json(cli("env", "show", "kv", "--json"))
    return [u["state"].get("kvVersion") for u in shown["services"][0]["units"]]


def test_a_package_move_whose_script_changed_reconfigures_every_unit(box, tmp_path):
    cli = runner(box.url, tmp_path)
    ok(cli("package", "upload", str(kvstore(tmp_path, "1.0.0"))))
    ok(cli("env", "create", "kv"))
    ok(cli("package", "use", "kv", "kvstore", "--yes"))
    ok(cli("service", "add", "kv", "--type", "kvStore", "--name", "store", "--units", "2",
           "--set", "osImage.name=local", "--set", "unitNamingPattern=kv#"))
    first = as_json(cli("deploy", "kv", "--json"))
    assert first["job"]["state"] == "success", first
    assert versions(cli) == ["kvstore 1.0.0"] * 2

    ok(cli("package", "upload", str(kvstore(tmp_path, "1.1.0"))))
    moved = ok(cli("package", "use", "kv", "kvstore@1.1.0", "--yes"))
    assert "~ templates/agent/scripts/deploy_kv.py" in moved, moved
    assert "configured again by the next deployment: fornace plan kv lists them" in moved

    why = "script deploy_kv.py changed in kvstore 1.1.0 (was kvstore 1.0.0)"
    plan = as_json(cli("plan", "kv", "--json"))
    planned = sorted((t["target_name"], t["operation"], t["reason"], t["status"])
                     for t in plan["job"]["tasks"] if t["target"])
    assert planned == [("kv1", "Kv/Deploy", why, "planned"),
                       ("kv2", "Kv/Deploy", why, "planned")], plan["job"]["tasks"]
    shown = ok(cli("plan", "kv"))
    assert re.search(r"^kv1\s+Kv/Deploy\s+script deploy_kv\.py changed in kvstore 1\.1\.0",
                     shown, re.M), shown
    assert versions(cli) == ["kvstore 1.0.0"] * 2         # a plan changes nothing

    second = as_json(cli("deploy", "kv", "--json"))
    assert second["job"]["state"] == "success", second
    ran = sorted((t["target_name"], t["reason"], t["status"])
                 for t in second["job"]["tasks"] if t["target"])
    assert ran == [("kv1", why, "ok"), ("kv2", why, "ok")], ran
    assert versions(cli) == ["kvstore 1.1.0"] * 2         # the units answer the new version

    jobs = as_json(cli("jobs", "kv", "--json"))["jobs"]
    deploys = [j for j in jobs if j["action"] == "deploy"]
    assert [j["packages"] for j in deploys] == [["kvstore 1.1.0"], ["kvstore 1.0.0"]]
    listing = ok(cli("jobs", "kv"))
    assert re.search(rf"^{second['job']['id']}\s+deploy\s+success\s.*kvstore 1\.1\.0$",
                     listing, re.M), listing
    assert "packages: kvstore 1.1.0" in ok(cli("jobs", "kv", second["job"]["id"]))

    trace = ok(cli("trace", "kv", second["job"]["id"]))
    assert "packages: kvstore 1.1.0" in trace, trace
    for unit in as_json(cli("env", "show", "kv", "--json"))["services"][0]["units"]:
        assert f"reconfigure {unit['id']} ({unit['state']['hostname']}): {why}" in trace, trace

    again = as_json(cli("deploy", "kv", "--json"))        # recorded: nothing runs again
    assert [t for t in again["job"]["tasks"] if t["target"] and t["status"] != "skipped"] == []

    dashboard = dashboard_page(box.url, f"/environments/{second['job']['environment_id']}"
                                        f"/jobs/{second['job']['id']}/trace")
    assert '<p id="trace-packages">Workflows of: <code>kvstore 1.1.0</code></p>' in dashboard
    assert re.findall(r"<li><b class=\"host\">(kv\d)</b> <code>\w+</code>: ([^<]+)</li>",
                      dashboard) == [("kv1", why), ("kv2", why)], dashboard

