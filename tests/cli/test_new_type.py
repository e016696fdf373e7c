"""A new service type is data: a catalog entry, a workflow, a template and a script.

The test makes a data folder (a copy of the built-in one, as an operator's
would be) and adds a type ``linuxNote`` to it without any Python of
Fornace's: its create spec as JSON Schema in ``types.json``, a workflow with
only its configuration rule (its instances come from the Linux instance
rules of ``Common.xml``: it extends ``linuxService``, whose ``instance``
keys it inherits), the plan's template and script.  Fornace started on that
folder (``data_dir``) validates the type's services with that schema,
deploys it on the local cloud and masks its declared secret; the built-in
catalog does not know it.  (The dashboard's form of such a type:
``tests/api/test_dashboard_forms.py``.)

On the same Fornace, the authors' walk-through
(``doc/source/authors/new-type.rst``) runs as written: a type shipped as a
workflow package holding no instance rule, no instance template and not the
data folder's helper script, checked, uploaded, used, deployed and shown
through the command line; its units' pages answer.
"""
from __future__ import annotations

import json
import re
import shutil
import urllib.request
from pathlib import Path

import pytest

from fornace.api import specs
from fornace.cli.client.http import ApiClient, ClientError
from fornace.cli.demo import Demo
from fornace.cli.main import build_conf
from fornace.common.resources import BUILTIN_DATA
from clikit import as_json, ok, runner
from dockit import ROOT, file_blocks, literal_block_after, shell
from localkit import running_onebox

TIMEOUT = 120.0
WALK_THROUGH = ROOT / "doc" / "source" / "authors" / "new-type.rst"

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
<!-- linuxNote: each unit writes the service's text into note.txt (plan Notes/WriteNote);
     its instances come from Common.xml's Linux instance rules (it extends linuxService). -->
<workflow>
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


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    root = tmp_path_factory.mktemp("new-type")
    conf = build_conf()
    conf(["up"], project="fornace", default_config_files=[], default_config_dirs=[])
    conf.set_override("data_dir", str(note_data_folder(root)))
    yield from running_onebox(root / "state", max_environments=2, conf=conf)


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


def test_the_authors_walk_through_runs_as_written(box, tmp_path):
    text = WALK_THROUGH.read_text()
    files = file_blocks(text, "greeting")
    assert sorted(files) == [
        "greeting/package.json", "greeting/templates/agent/Greeting/Serve.template",
        "greeting/templates/agent/scripts/serve_greeting.py", "greeting/types.json",
        "greeting/workflows/Greeting.xml"]
    # data only, built from the catalog's parts: no instance rule, no instance
    # template, not the data folder's helper script
    assert "update-cf-stack" not in files["greeting/workflows/Greeting.xml"]
    assert not any(path.startswith("greeting/templates/cf/") or
                   path.endswith("fornace_unit.py") for path in files)
    for path, content in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(content)

    commands = literal_block_after(text, "from the folder")
    assert [command.split()[:3] for command in commands] == [
        ["fornace", "workflow", "check"], ["fornace", "package", "upload"],
        ["fornace", "env", "create"], ["fornace", "package", "use"],
        ["fornace", "service", "add"], ["fornace", "deploy", "hello"],
        ["fornace", "outputs", "hello"], ["fornace", "env", "delete"]]
    home = tmp_path / "home"
    home.mkdir()
    for command in commands:
        done = shell(command, box.url, home, cwd=tmp_path)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        if command.startswith("fornace deploy"):
            assert "deploy succeeded" in done.stdout, done.stdout
            assert "Instance greet1 (greeter_instance_" in done.stdout, done.stdout
            assert "Greeting served on greet2: http://" in done.stdout, done.stdout
        if command.startswith("fornace outputs"):
            urls = re.findall(r"http://[0-9.]+:8080/", done.stdout)
            assert len(urls) == 2 and "greet1" in done.stdout, done.stdout
            for url in urls:
                with urllib.request.urlopen(url, timeout=10) as answer:
                    assert answer.read() == b"<h1>Bonjour</h1>\n"
    assert "hello" not in [e["name"] for e in
                           ApiClient(box.url).get("/environments")["environments"]]
