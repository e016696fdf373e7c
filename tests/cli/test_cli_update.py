"""``fornace service update ENV SERVICE --set FIELD=VALUE | --file FILE``: fields of
a service changed in the configuration session, and what changed printed."""
from __future__ import annotations

import json

import pytest

from apikit import free_port
from clikit import as_json, ok, one_line_error, site
from fornace.cli.client.service import changed_service, field_changes, unknown_fields
from fornace.common.errors import FornaceError


# ----------------------------------------------------------------------- pure helpers

def test_settings_go_inside_objects_and_a_file_merges_as_a_merge_patch():
    service = {"id": "s1", "name": "web", "type": "linuxWebServer", "port": 80,
               "osImage": {"name": "local", "type": "linux"}, "units": [{"id": "u1"}]}
    changed = changed_service(service, {"port": None, "flavor": "m1.small",
                                        "osImage": {"type": "debian"}},
                              {"osImage.name": "debian-12", "dependsOn": ["db"]})
    assert changed == {"id": "s1", "name": "web", "type": "linuxWebServer",
                       "osImage": {"name": "debian-12", "type": "debian"},
                       "units": [{"id": "u1"}], "flavor": "m1.small", "dependsOn": ["db"]}
    assert service["port"] == 80 and service["osImage"]["name"] == "local"   # not touched
    with pytest.raises(FornaceError, match="the id of service web cannot change"):
        changed_service(service, {}, {"id": "other"})


def test_field_changes_name_each_dotted_field_and_a_changed_secret():
    before = {"id": "s1", "port": 80, "osImage": {"name": "local"}, "adminPassword": "***",
              "updated": "t1"}
    after = {"id": "s1", "osImage": {"name": "debian-12"}, "adminPassword": "***",
             "flavor": "m1.small", "updated": "t2"}
    assert field_changes(before, after, touched={"adminPassword"}) == [
        ("adminPassword", '"***"', '"***" (changed)'),
        ("flavor", "-", '"m1.small"'),
        ("osImage.name", '"local"', '"debian-12"'),
        ("port", "80", "-")]
    assert field_changes(before, before) == []


def test_fields_the_type_does_not_declare_are_named():
    service = {"type": "linuxWebServer"}
    assert unknown_fields(service, {"prot", "port", "osImage.name", "adminPassword",
                                    "state.x"}) == ["prot"]
    assert unknown_fields({"type": "someoneElsesType"}, {"prot"}) == []


# ------------------------------------------------------------------- against the API

def test_update_changes_fields_in_the_session_and_prints_them(cli, tmp_path):
    ok(cli("env", "create", "cli-update"))
    port, other = free_port(), free_port()
    service = tmp_path / "site.json"
    service.write_text(json.dumps(site("web", port, units=2)))
    ok(cli("service", "add", "cli-update", "--file", str(service)))

    done = cli("service", "update", "cli-update", "web", "--set", f"port={other}",
               "--set", "osImage.name=debian-12", "--set", "prot=1")
    out = ok(done)
    lines = out.splitlines()
    assert lines[0].startswith("updated service web (linuxWebServer, id ")
    assert lines[1:4] == ['  osImage.name: "local" -> "debian-12"',
                          f"  port: {port} -> {other}", "  prot: - -> 1"]
    assert lines[4].startswith("not deployed yet: run 'fornace deploy cli-update' (session ")
    assert "'prot' is not a field of linuxWebServer services" in done.stderr

    [stored] = as_json(cli("service", "list", "cli-update", "--json"))
    assert stored["port"] == other                        # JSON: a number, not text
    assert stored["osImage"] == {"name": "debian-12", "type": "linux"}   # set inside
    assert len(stored["units"]) == 2

    patch = tmp_path / "patch.yaml"      # a merge patch: null removes a field
    patch.write_text("prot: null\nosImage: {name: local}\nadminPassword: 'Secr3t!x'\n")
    out = ok(cli("service", "update", "cli-update", stored["id"], "--file", str(patch)))
    assert out.splitlines()[1:4] == ['  adminPassword: - -> "***"',
                                     '  osImage.name: "debian-12" -> "local"',
                                     "  prot: 1 -> -"]
    [stored] = as_json(cli("service", "list", "cli-update", "--json"))
    assert "prot" not in stored and stored["adminPassword"] == "***"

    again = ok(cli("service", "update", "cli-update", "web", "--set", "osImage.name=local"))
    assert "nothing changed" in again

    # refused by the API (400): one line, exit 2, nothing changed
    line = one_line_error(cli("service", "update", "cli-update", "web", "--set", "port=x"), 2)
    assert "port" in line and "integer" in line
    assert "say what to change" in one_line_error(
        cli("service", "update", "cli-update", "web"), 2)
    assert "'nope'" in one_line_error(
        cli("service", "update", "cli-update", "nope", "--set", "port=1"), 2)
    listed = tmp_path / "list.json"
    listed.write_text("[1]")
    assert "expected an object" in one_line_error(
        cli("service", "update", "cli-update", "web", "--file", str(listed)), 2)
    [stored] = as_json(cli("service", "list", "cli-update", "--json"))
    assert stored["port"] == other
    ok(cli("env", "delete", "cli-update", "--yes"))
