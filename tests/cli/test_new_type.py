"""A new service type is data: a catalog entry, a workflow, a template and a script.

The test makes a data folder (a copy of the built-in one, as an operator's
would be) and adds a type ``linuxNote`` to it without any Python of
Fornace's: its create spec as JSON Schema in ``types.json``, a workflow
creating its instances and running its plan, the plan's template and
script.  Fornace started on that folder (``data_dir``) validates the type's
services with that schema, deploys it on the local cloud and masks its
declared secret; the built-in catalog does not know it.  (The dashboard's
form of such a type: ``tests/api/test_dashboard_forms.py``.)
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fornace.api import specs
from fornace.cli.client.http import ApiClient, ClientError
from fornace.cli.demo import Demo
from fornace.cli.main import build_conf
from fornace.common.resources import BUILTIN_DATA
from clikit import as_json, ok, runner
from localkit import running_onebox

TIMEOUT = 120.0

NOTE_TYPE = {
    "extends": "linuxService",
    "doc": "No operations: a deployment writes the note on each unit.",
    "schema": {
        "description": "a note written on each unit",
        "required": ["type", "name", "text", "units"],
        "properties": {
            "text": {"type": "string", "x-check": "nonblank", "maxLength": 200,
                     "title": "Note text", "description": "What each unit writes down."},
            "copies": {"type": "integer", "minimum": 1, "maximum": 5, "default": 1,
                       "title": "Copies", "description": "How many times the text is written."},
            "signature": {"type": "string", "writeOnly": True, "title": "Signature",
                          "description": "Kept secret: never shown again."},
            "units": {"minItems": 1, "maxItems": 3},
        },
    },
}

WORKFLOW = """<?xml version="1.0"?>
<!-- linuxNote: each unit writes the service's text into note.txt (plan Notes/WriteNote). -->
<workflow>
    <rule match="$.services[?(@.type == 'linuxNote')].units[?(@.state.hostname and not @.temp.instanceName)]"
          desc="Note units without an instance in this deployment">
        <update-cf-stack template="LinuxInstance" error="exception" result="outputs">
            <parameter name="mappings">
                <map>
                    <mapping name="instanceName"><select path="state.hostname"/></mapping>
                    <mapping name="flavor"><select path="::flavor" default="m1.small"/></mapping>
                    <mapping name="imageName"><select path="::osImage.name"/></mapping>
                    <mapping name="userData">
                        <prepare-user-data initFile="init.sh" template="Default">
                            <parameter name="hostname"><select path="state.hostname"/></parameter>
                            <parameter name="unit"><select path="id"/></parameter>
                            <parameter name="service"><select path="::id"/></parameter>
                        </prepare-user-data>
                    </mapping>
                </map>
            </parameter>
            <success>
                <set path="temp.instanceName"><select path="name"/></set>
                <set path="state.address"><select source="outputs"><parameter name="path"><select path="state.hostname"/></parameter></select></set>
            </success>
            <failure>
                <report entity="unit" level="error">
                    <parameter name="id"><select path="id"/></parameter>
                    <parameter name="text">No instance for <select path="state.hostname"/></parameter>
                </report>
                <stop/>
            </failure>
        </update-cf-stack>
    </rule>

    <rule match="$.services[?(@.type == 'linuxNote')].units[?(@.temp.instanceName and not @.state.noted)]"
          desc="Note units that have not written the note">
        <set path="state.noted"><true/></set>
        <send-command template="Notes/WriteNote" error="exception" result="outcome">
            <parameter name="service"><select path="::id"/></parameter>
            <parameter name="unit"><select path="id"/></parameter>
            <parameter name="mappings">
                <map>
                    <mapping name="text"><select path="::text"/></mapping>
                    <mapping name="copies"><select path="::copies" default="1"/></mapping>
                </map>
            </parameter>
            <success>
                <set path="state.note"><select source="outcome" path="0.Result.0"/></set>
                <report entity="unit">
                    <parameter name="id"><select path="id"/></parameter>
                    <parameter name="text">Note written on <select path="state.hostname"/></parameter>
                </report>
            </success>
            <failure>
                <report entity="unit" level="error">
                    <parameter name="id"><select path="id"/></parameter>
                    <parameter name="text">No note on <select path="state.hostname"/></parameter>
                </report>
            </failure>
        </send-command>
    </rule>
</workflow>
"""

TEMPLATE = {
    "FormatVersion": "2.0",
    "Scripts": ["write_note.py"],
    "Commands": [{"Name": "write_note.py", "Arguments": {"text": "$text", "copies": "$copies"}}],
    "RebootOnCompletion": 0,
}

SCRIPT = '''"""Write the note (arguments as a JSON object on stdin) into note.txt."""
import json
import os
import sys

text = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
args = json.loads(text) if text.strip() else {}
args = {name: args.get(name, os.environ.get(name)) for name in ("text", "copies")}
work = os.environ.get("FORNACE_WORK_DIR") or os.getcwd()
path = os.path.join(work, "note.txt")
with open(path, "w") as note:
    note.write(str(args["text"]) * int(args["copies"]))
print("wrote " + open(path).read())
'''


def note_data_folder(root: Path) -> Path:
    """A copy of the built-in data folder with the ``linuxNote`` type added."""
    data = root / "data"
    shutil.copytree(BUILTIN_DATA, data, ignore=shutil.ignore_patterns("__pycache__", "*.py[co]"))
    catalog = json.loads((data / "types.json").read_text())
    catalog["types"]["linuxNote"] = NOTE_TYPE
    (data / "types.json").write_text(json.dumps(catalog, indent=4))
    (data / "workflows" / "LinuxNote.xml").write_text(WORKFLOW)
    (data / "templates" / "agent" / "Notes").mkdir()
    (data / "templates" / "agent" / "Notes" / "WriteNote.template").write_text(
        json.dumps(TEMPLATE))
    (data / "templates" / "agent" / "scripts" / "write_note.py").write_text(SCRIPT)
    return data


@pytest.fixture
def box(tmp_path):
    conf = build_conf()
    conf(["up"], project="fornace", default_config_files=[], default_config_dirs=[])
    conf.set_override("data_dir", str(note_data_folder(tmp_path)))
    yield from running_onebox(tmp_path / "state", max_environments=1, conf=conf)


def refused(call) -> str:
    with pytest.raises(ClientError) as caught:
        call()
    assert caught.value.status == 400, caught.value
    return str(caught.value)


def test_the_command_line_adds_a_service_of_the_type(box, tmp_path):
    cli = runner(box.url, tmp_path)
    ok(cli("env", "create", "notes-cli"))
    add = ("service", "add", "notes-cli", "--type", "linuxNote", "--name", "memo")
    done = cli(*add, "--set", "text= ", "--set", "osImage.name=local")
    assert done.returncode != 0 and "text: must not be empty" in done.stderr, done.stderr
    ok(cli(*add, "--set", "text=hi", "--set", "signature=s1gn3d", "--set", "osImage.name=local"))
    [service] = as_json(cli("service", "list", "notes-cli", "--json"))
    assert service["type"] == "linuxNote" and service["signature"] == "***", service


def test_a_type_added_as_data_is_validated_and_deployed(box):
    assert "linuxNote" not in specs.SERVICE_TYPES      # not a built-in type
    client = ApiClient(box.url)
    env = client.post("/environments", {"name": "notes"})
    session = client.post(f"/environments/{env['id']}/configure")["id"]
    services = f"/environments/{env['id']}/services"

    def add(**fields):
        service = {"type": "linuxNote", "name": "memo", "text": "hi",
                   "osImage": {"name": "local", "type": "linux"}, "units": [{}], **fields}
        return client.post(services, service, session=session)

    # the schema of the data folder is the API's: its checks, its field paths
    assert "copies: must be between 1 and 5" in refused(lambda: add(copies=9))
    assert "text: must not be empty" in refused(lambda: add(text=" "))
    assert "text: must have at most 200 characters" in refused(lambda: add(text="x" * 201))
    assert "units: a linuxNote service takes at most 3 units" in refused(
        lambda: add(units=[{}] * 4))
    assert "colour: unknown field for a linuxNote service" in refused(lambda: add(colour=1))
    assert "units[0].size: unknown field for a linuxNote unit" in refused(
        lambda: add(units=[{"size": 2}]))

    # the declared secret is masked although its name is not a password's
    service = add(copies=2, signature="s1gn3d", unitNamingPattern="note#", units=[{}, {}])
    assert service["signature"] == "***"
    assert client.get(f"{services}/{service['id']}", session=session)["signature"] == "***"

    client.post(f"/environments/{env['id']}/sessions/{session}/deploy")
    demo = Demo(client, lambda text: None, TIMEOUT)
    demo.env_id = env["id"]
    ready = demo.follow(lambda body: body is not None and body["status"] not in (
        "deploying", "pending"))
    assert ready["status"] == "ready", ready
    units = ready["services"][0]["units"]
    assert [u["state"]["hostname"] for u in units] == ["note1", "note2"]
    assert [u["state"]["note"] for u in units] == ["wrote hihi"] * 2
    assert ready["services"][0]["signature"] == "***"

    demo.delete()
