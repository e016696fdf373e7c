"""``-f table|json|yaml|value`` of every list and show command, the times they
print (local time with its offset), and ``fornace outputs``.

The commands run against one environment deployed once for the module (the
``box`` of conftest.py); the times are printed for ``TZ=XYZ-2`` (two hours
east of UTC, a POSIX zone that needs no zone files).
"""
from __future__ import annotations

import argparse
import datetime
import json
import re

import pytest
import yaml

from apikit import free_port
from clikit import as_json, ok, one_line_error, runner, site
from fornace.cli.client.formats import format_of, local_time, value_cell
from fornace.cli.client.outputs import output_rows, show_outputs
from fornace.cli.main import command_line, main
from fornace.common.errors import FornaceError

EAST = {"TZ": "XYZ-2"}
STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\+02:00"    # a time as the commands print it


# ----------------------------------------------------------------------- pure helpers

def test_json_is_a_synonym_of_f_json_and_they_cannot_disagree():
    command = argparse.Namespace
    assert format_of(command(json=False, format=None)) == "table"
    assert format_of(command(json=True, format=None)) == "json"
    assert format_of(command(json=True, format="json")) == "json"
    assert format_of(command(json=False, format="value")) == "value"
    with pytest.raises(FornaceError, match="--json and -f yaml"):
        format_of(command(json=True, format="yaml"))


def test_value_cells_are_whole_and_on_one_line():
    long = "x" * 300
    assert value_cell(long) == long                 # a table cuts it, value does not
    assert value_cell(None) == "" and value_cell(0) == "0"
    assert value_cell("a\tb\nc") == "a b c"         # a cell stays one field of one line
    assert value_cell({"a": [1, True]}) == '{"a": [1, true]}'


def test_api_times_are_shown_with_the_local_offset(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "XYZ-2")
    time.tzset()
    try:
        assert local_time("2024-05-01T12:00:00") == "2024-05-01 14:00:00+02:00"
        assert local_time("2024-05-01T12:00:00+00:00") == "2024-05-01 14:00:00+02:00"
        monkeypatch.setenv("TZ", "UTC")
        time.tzset()
        assert local_time("2024-05-01T12:00:00") == "2024-05-01 12:00:00+00:00"
    finally:
        monkeypatch.undo()
        time.tzset()
    assert local_time(None) is None and local_time("not a time") == "not a time"


def test_outputs_without_any_url_say_the_units_are_reached_at_their_addresses(capsys):
    data = {"environment": {"id": "e1", "name": "dir"}, "job": "j1", "services": [
        {"id": "s1", "name": "dc", "type": "activeDirectory", "url": None, "address": None,
         "units": [{"id": "u1", "name": "dc_instance_0", "hostname": "dc1",
                    "address": "10.0.0.5", "url": None}]}], "urls": []}
    show_outputs(data, output_rows(data))   # a job runs: URLs may come
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "job j1 running: the endpoints it has set up so far"
    assert lines[1].split() == ["SERVICE", "UNIT", "HOSTNAME", "ADDRESS", "URL"]
    data["job"] = None
    show_outputs(data, output_rows(data))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["SERVICE", "UNIT", "HOSTNAME", "ADDRESS"]
    assert lines[2].split() == ["dc", "dc_instance_0", "dc1", "10.0.0.5"]
    assert "reached at their addresses" in lines[-1]


def test_output_rows_put_a_farms_url_on_its_service_row():
    data = {"environment": {"id": "e1", "name": "web"}, "services": [
        {"id": "s1", "name": "farm", "type": "linuxWebServerFarm",
         "url": "http://10.0.0.9:80/", "address": "10.0.0.9", "units": [
             {"id": "u1", "name": "farm_instance_0", "hostname": "farm1",
              "address": "10.0.0.11", "url": "http://10.0.0.11:8080/"},
             {"id": "u2", "name": "farm_instance_1", "hostname": None, "address": None,
              "url": None}]}],
        "urls": [{"service": "farm", "unit": None, "url": "http://10.0.0.9:80/"}]}
    assert output_rows(data) == [
        ("farm", None, None, "10.0.0.9", "http://10.0.0.9:80/"),
        ("farm", "farm_instance_0", "farm1", "10.0.0.11", "http://10.0.0.11:8080/"),
        ("farm", "farm_instance_1", None, None, None)]


@pytest.mark.parametrize("args", [
    ["env", "list"], ["env", "show", "E"], ["service", "list", "E"], ["jobs", "E"],
    ["deployments", "E"], ["status", "E"], ["topology", "E"], ["plan", "E"],
    ["outputs", "E"]])
def test_every_list_and_show_command_takes_f(capsys, args):
    with pytest.raises(SystemExit) as done:
        main([*args, "--help"])
    assert done.value.code == 0
    assert "-f {table,json,yaml,value}, --format {table,json,yaml,value}" in \
        capsys.readouterr().out


def test_format_and_yes_given_before_the_command_reach_it():
    assert command_line(["-f", "value", "--yes", "env", "list"]) == [
        "env", "list", "-f", "value", "--yes"]
    assert command_line(["--format=yaml", "jobs", "E"]) == ["jobs", "E", "--format=yaml"]


# ---------------------------------------------------- against a deployed environment

@pytest.fixture(scope="module")
def deployed(box, tmp_path_factory):
    """(runner, environment as the API shows it): ``cli-formats`` with a service of
    two units, deployed."""
    run = runner(box.url, tmp_path_factory.mktemp("formats"))
    ok(run("env", "create", "cli-formats"))
    service = tmp_path_factory.mktemp("files") / "site.json"
    service.write_text(json.dumps(site("fmt", free_port(), units=2)))
    ok(run("deploy", "cli-formats", "--service", str(service)))
    yield run, as_json(run("env", "show", "cli-formats", "--json"))
    run("env", "delete", "cli-formats", "--yes")


def values(done) -> list[list[str]]:
    return [line.split("\t") for line in ok(done).splitlines()]


def test_env_list_and_show_in_each_format(deployed):
    run, env = deployed
    listed = as_json(run("env", "list", "-f", "json"))
    assert listed == as_json(run("env", "list", "--json"))
    assert yaml.safe_load(ok(run("env", "list", "-f", "yaml"))) == listed
    row = next(r for r in values(run("env", "list", "-f", "value", env=EAST))
               if r[0] == env["id"])
    assert row[:4] == [env["id"], "cli-formats", "ready", "1"]
    assert re.fullmatch(STAMP, row[4]), row
    assert row[4] == _east(env["updated"])

    table = ok(run("env", "list", env=EAST))
    assert table.splitlines()[0].split() == ["ID", "NAME", "STATUS", "VERSION", "UPDATED",
                                             "REGION"]
    assert re.search(rf"^{env['id']}\s+cli-formats\s+ready\s+1\s+{STAMP}\s+-$", table, re.M)

    assert values(run("env", "show", "cli-formats", "-f", "value", env=EAST)) == [
        [env["id"], "cli-formats", "ready", "1", _east(env["created"]),
         _east(env["updated"]), ""]]
    shown = ok(run("env", "show", "cli-formats", env=EAST))
    assert f"  created  {_east(env['created'])}\n" in shown
    assert yaml.safe_load(ok(run("env", "show", "cli-formats", "-f", "yaml")))["id"] == \
        env["id"]
    line = one_line_error(run("env", "list", "--json", "-f", "yaml"), 2)
    assert "--json and -f yaml" in line


def test_env_create_with_a_region_shows_it(box, tmp_path):
    run = runner(box.url, tmp_path)
    created = ok(run("env", "create", "cli-region", "--region", "RegionTwo"))
    assert created.startswith("created environment cli-region (id ")
    assert created.rstrip().endswith(") in region RegionTwo")
    try:
        env = as_json(run("env", "show", "cli-region", "--json"))
        assert env["region"] == "RegionTwo"
        assert "  region   RegionTwo\n" in ok(run("env", "show", "cli-region"))
        assert values(run("env", "show", "cli-region", "-f", "value"))[0][6] == "RegionTwo"
        row = next(r for r in values(run("env", "list", "-f", "value"))
                   if r[0] == env["id"])
        assert row[5] == "RegionTwo"
        assert re.search(rf"^{env['id']}\s+cli-region\s+ready\s+0\s+\S+ \S+\s+RegionTwo$",
                         ok(run("env", "list")), re.M)
        line = one_line_error(run("env", "create", "cli-region-2", "--region", "x" * 300), 2)
        assert "region: String should have at most 255 characters" in line
    finally:
        run("env", "delete", "cli-region", "--yes")


def test_service_list_status_and_topology_values(deployed):
    run, env = deployed
    units = env["services"][0]["units"]
    hostnames = sorted(u["state"]["hostname"] for u in units)
    rows = values(run("service", "list", "cli-formats", "-f", "value"))
    assert sorted(r[3] for r in rows) == hostnames
    assert {(r[0], r[1], r[5]) for r in rows} == {("fmt", "linuxWebServer",
                                                   env["services"][0]["id"])}
    assert yaml.safe_load(ok(run("service", "list", "cli-formats", "-f", "yaml"))) == \
        as_json(run("service", "list", "cli-formats", "--json"))

    status = values(run("status", "cli-formats", "-f", "value"))
    assert status[0][:3] == ["fmt", "linuxWebServer", ""]
    assert sorted(r[2] for r in status[1:]) == sorted(u["name"] for u in units)
    assert sorted(r[5] for r in status[1:]) == hostnames
    assert sorted(r[6] for r in status[1:]) == sorted(u["state"]["address"] for u in units)
    assert "environment cli-formats: ready, version 1" in ok(run("status", "cli-formats"))

    assert values(run("topology", "cli-formats", "-f", "value")) == [
        ["0", "fmt", "linuxWebServer", ", ".join(
            u["state"]["hostname"] for u in units), ""]]
    table = ok(run("topology", "cli-formats"))
    assert table.splitlines()[0].split() == ["LEVEL", "SERVICE", "TYPE", "UNITS", "DEPENDS",
                                             "ON"]


def test_jobs_deployments_and_plan_values_with_their_times(deployed):
    run, env = deployed
    jobs = as_json(run("jobs", "cli-formats", "--json"))["jobs"]
    deploy = next(j for j in jobs if j["action"] == "deploy")
    row = next(r for r in values(run("jobs", "cli-formats", "-f", "value", env=EAST))
               if r[0] == deploy["id"])
    assert row == [deploy["id"], "deploy", "success",
                   ", ".join(f"{n} {s}" for s, n in sorted(deploy["task_counts"].items())),
                   _east(deploy["started"]), _east(deploy["finished"]), "data folder"]
    one = ok(run("jobs", "cli-formats", deploy["id"], env=EAST))
    assert one.startswith(f"job {deploy['id']}: deploy success (started "
                          f"{_east(deploy['started'])}, finished "
                          f"{_east(deploy['finished'])})")
    tasks = values(run("jobs", "cli-formats", deploy["id"], "-f", "value"))
    assert {(r[1], r[3]) for r in tasks if r[0].startswith("fmt")} == {
        ("Linux/DeployStaticSite", "ok")}

    listed = values(run("deployments", "cli-formats", "-f", "value", env=EAST))
    assert [deploy["id"], "success", _east(deploy["started"]),
            _east(deploy["finished"])] in listed
    reports = as_json(run("deployments", "cli-formats", deploy["id"], "--json"))["reports"]
    shown = values(run("deployments", "cli-formats", deploy["id"], "-f", "value", env=EAST))
    assert shown == [[_east(r["created"]), r["level"], r["text"]] for r in reports]
    printed = ok(run("deployments", "cli-formats", deploy["id"], env=EAST))
    assert printed.splitlines()[0] == f"{_east(reports[0]['created'])} report: " \
                                      f"{reports[0]['text']}"

    plan = values(run("plan", "cli-formats", "-f", "value"))
    assert plan and all(len(r) == 4 for r in plan)
    assert yaml.safe_load(ok(run("plan", "cli-formats", "-f", "yaml")))["job"]["action"] \
        == "plan"


def test_outputs_lists_each_service_and_unit_endpoint(deployed):
    run, env = deployed
    data = as_json(run("outputs", "cli-formats", "--json"))
    assert data["environment"] == {"id": env["id"], "name": "cli-formats"}
    units = {u["state"]["hostname"]: u for u in env["services"][0]["units"]}
    rows = values(run("outputs", "cli-formats", "-f", "value"))
    assert rows[0][:3] == ["fmt", "", ""]
    assert {r[2]: r[3] for r in rows[1:]} == {
        hostname: unit["state"].get("address") or "" for hostname, unit in units.items()}
    assert [r[4] for r in rows] == [data["services"][0]["url"] or ""] + [
        u["url"] or "" for u in data["services"][0]["units"]]
    table = ok(run("outputs", "cli-formats"))
    assert table.splitlines()[0].split() == ["SERVICE", "UNIT", "HOSTNAME", "ADDRESS", "URL"]
    for hostname in units:
        assert re.search(rf"^fmt\s+fmt_instance_\d\s+{hostname}\s", table, re.M), table
    assert yaml.safe_load(ok(run("outputs", "cli-formats", "-f", "yaml"))) == data
    assert "'nowhere'" in one_line_error(run("outputs", "nowhere"), 2)


def _east(text: str) -> str:
    """An API time as the commands print it under TZ=XYZ-2."""
    moment = datetime.datetime.fromisoformat(text).replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone(datetime.timedelta(hours=2))).isoformat(
        sep=" ", timespec="seconds")
