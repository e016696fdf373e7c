"""``fornace workflow check`` and ``fornace workflow simulate`` end to end."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fornace.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "data" / "examples" / "linux-web.json"


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def write_catalog(root: Path, workflows: dict[str, str], cf: dict | None = None,
                  agent: dict | None = None, scripts: dict | None = None) -> Path:
    for name, text in workflows.items():
        path = root / "workflows" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder, files in (("templates/cf", cf or {}), ("templates/agent", agent or {})):
        for name, body in files.items():
            path = root / folder / f"{name}.template"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(body))
    for name, text in (scripts or {}).items():
        path = root / "templates/agent/scripts" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_shipped_workflows_are_clean(capsys):
    code, out, _ = run_cli(capsys, "workflow", "check", str(ROOT / "data" / "workflows"))
    assert (code, out) == (0, "")


def test_check_reports_every_problem_with_file_and_line(tmp_path, capsys):
    write_catalog(tmp_path, {
        "a.xml": '<workflow>\n  <rule match="$.services[?(len(@.x))]"/>\n'
                 '  <frobnicate/>\n'
                 '  <rule match="$">\n    <update-cf-stack template="Missing"/>\n'
                 '    <select><parameter name="pth">x</parameter></select>\n'
                 '    <send-command template="Plan" service="s" unit="u"/>\n  </rule>\n'
                 '</workflow>\n',
        "b.xml": "<workflow>\n  <rule match='$'>\n</workflow>\n",
    }, agent={"Plan": {"Scripts": ["absent.ps1"], "Commands": []}})
    code, out, _ = run_cli(capsys, "workflow", "check", str(tmp_path / "workflows"))
    assert code == 1
    lines = out.splitlines()
    a, b = tmp_path / "workflows" / "a.xml", tmp_path / "workflows" / "b.xml"
    assert any(line.startswith(f"{a}:2: ") and "function calls" in line for line in lines)
    assert any(line.startswith(f"{a}:3: ") and "unknown function <frobnicate>" in line
               for line in lines)
    assert any(line.startswith(f"{a}:5: ") and "'Missing'" in line for line in lines)
    assert any(line.startswith(f"{a}:6: ") and "unknown parameter 'pth' of <select>" in line
               for line in lines)
    assert any(line.startswith(f"{a}:7: ") and "absent.ps1" in line for line in lines)
    assert any(line.startswith(f"{b}:") and "XML syntax error" in line for line in lines)


def test_check_json_lists_problems_as_objects(tmp_path, capsys):
    write_catalog(tmp_path, {"a.xml": "<workflow>\n  <frobnicate/>\n</workflow>\n"})
    code, out, _ = run_cli(capsys, "workflow", "check", "--json", str(tmp_path / "workflows"))
    assert code == 1
    assert json.loads(out) == {"problems": [{
        "file": str(tmp_path / "workflows" / "a.xml"), "line": 2,
        "message": "unknown function <frobnicate>"}], "warnings": []}
    code, out, _ = run_cli(capsys, "workflow", "check", "--json", str(ROOT / "data" / "workflows"))
    assert (code, json.loads(out)) == (0, {"problems": [], "warnings": []})


def test_check_of_a_missing_path_is_bad_usage(tmp_path, capsys):
    """A file that is not there is a mistyped command (exit 2), not a problem found in
    a workflow (1): regression, it was reported as a problem with exit status 1."""
    code, out, err = run_cli(capsys, "workflow", "check", str(ROOT / "data" / "workflows"),
                             str(tmp_path / "nope.xml"))
    assert (code, out) == (2, "")
    assert err == f"fornace: {tmp_path / 'nope.xml'}: no such file or folder\n"


def test_simulate_example_json(capsys):
    code, out, _ = run_cli(capsys, "workflow", "simulate", "--model", str(EXAMPLE), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["status"] == "success"
    kinds = [(a["kind"], a["template"], a["unit"])
             for r in doc["rounds"] for a in r["actions"]]
    assert kinds == [("update-cf-stack", "LinuxInstance", None)] * 2 + [
        ("send-command", "Linux/DeployStaticSite", "unit0001"),
        ("send-command", "Linux/DeployStaticSite", "unit0002")]
    first = doc["rounds"][0]["actions"][0]
    assert set(first) >= {"kind", "template", "service", "unit", "mappings", "arguments"}
    assert first["mappings"]["instanceName"] == "web1"
    units = doc["model"]["services"][0]["units"]
    assert [u["state"] for u in units] == [
        {"hostname": "web1", "address": None, "siteDeployed": True, "url": None},
        {"hostname": "web2", "address": None, "siteDeployed": True, "url": None}]
    texts = [r["text"] for r in doc["reports"]]
    assert "Web site deployed on web1: ok" in texts and "Service site is ready" in texts
    assert all(set(r) >= {"entity", "id", "level", "text"}
               for rnd in doc["rounds"] for r in rnd["reports"])


def test_simulate_text_trace_and_failure(capsys):
    """The example workflow records a unit's failure as an error report and goes on;
    the deployment then ends as the API ends such a job, completed_w_errors, exit
    status 1 (regression: it printed "deployment success" and exited 0)."""
    code, out, err = run_cli(capsys, "workflow", "simulate", "--model", str(EXAMPLE),
                             "--fail", "Linux/DeployStaticSite:web2")
    assert code == 1
    assert "== round 1" in out and "matched services.0.units.0 (unit0001)" in out
    assert "send-command Linux/DeployStaticSite on unit unit0002: failure" in out
    assert "report [error] unit unit0002: Web site deployment on web2 failed" in out
    assert "Service site is ready" not in out
    assert "\n== deployment completed_w_errors after 3 round(s) (1 error report(s))\n" in out
    assert err.startswith("fornace: the deployment ended completed_w_errors: Web site "
                          "deployment on web2 failed: simulated failure")


def test_simulate_json_status_says_completed_w_errors(capsys):
    code, out, _ = run_cli(capsys, "workflow", "simulate", "--model", str(EXAMPLE),
                           "--fail", "Linux/DeployStaticSite:web1", "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["status"] == "completed_w_errors"
    assert [r["text"][:33] for r in doc["reports"] if r["level"] == "error"] == [
        "Web site deployment on web1 faile"]


@pytest.mark.parametrize("kind, word", [("noSuchType", "unknown"), ("linuxService", "abstract"),
                                        (7, "unknown")])
def test_simulate_refuses_a_service_of_a_type_the_catalog_lacks(tmp_path, capsys, kind, word):
    model = json.loads(EXAMPLE.read_text())
    model["services"].append({**model["services"][0], "id": "other01", "name": "other",
                              "type": kind})
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model))
    code, out, err = run_cli(capsys, "workflow", "simulate", "--model", str(path))
    assert (code, out) == (2, "")
    assert err.startswith(f"fornace: {path}: $.services[1] (service other) has the {word} "
                          f"type {kind!r} (the types of ")
    assert "linuxWebServer" in err and "Traceback" not in err


def test_simulate_of_a_catalog_without_types_json_checks_no_type(stopping_catalog, capsys):
    root, model = stopping_catalog
    data = json.loads(model.read_text())
    data["services"][0]["type"] = "ownType"
    model.write_text(json.dumps(data))
    code, _, _ = run_cli(capsys, "workflow", "simulate", "--model", str(model),
                         "--data", str(root))
    assert code == 0


STOPPING = """<workflow>
  <rule match="$.services[*].units[?(not @.state.done)]">
    <send-command template="Work" error="e">
      <parameter name="service"><select path="::id"/></parameter>
      <parameter name="unit"><select path="id"/></parameter>
      <parameter name="mappings"><map><pw name="pw"><select path="::adminPassword"/></pw></map></parameter>
      <success><set path="state.done"><select source="result" path="0.Result.0"/></set></success>
      <failure><report entity="unit" level="error"><parameter name="id"><select path="id"/></parameter>
        <parameter name="text">failed: <select source="e" path="0.type"/></parameter></report><stop/></failure>
    </send-command>
  </rule>
</workflow>
"""


@pytest.fixture
def stopping_catalog(tmp_path):
    root = write_catalog(tmp_path / "cat", {"w.xml": STOPPING.replace(
        'error="e"', 'error="e" result="result"')},
        agent={"Work": {"Scripts": ["w.ps1"], "Commands": [{"Name": "Do", "Arguments": {"P": "$pw"}}]}},
        scripts={"w.ps1": "function Do {}"})
    model = tmp_path / "env.json"
    model.write_text(json.dumps({"id": "E", "services": [
        {"id": "S", "adminPassword": "Very$ecret1",
         "units": [{"id": "u1", "name": "one"}, {"id": "u2", "name": "two"}]}]}))
    return root, model


def test_simulate_other_catalog_stop_and_secrets(stopping_catalog, capsys):
    root, model = stopping_catalog
    code, out, _ = run_cli(capsys, "workflow", "simulate", "--model", str(model),
                           "--data", str(root), "--time-out", "Work:two", "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["status"] == "stopped"
    assert doc["reports"][-1]["text"] == "failed: timeout"
    assert "Very$ecret1" not in out
    assert doc["model"]["services"][0]["adminPassword"] == "***"
    assert doc["model"]["services"][0]["units"][0]["state"] == {"done": "ok"}


def test_simulate_result_option(stopping_catalog, capsys):
    root, model = stopping_catalog
    code, out, _ = run_cli(capsys, "workflow", "simulate", "--model", str(model),
                           "--data", str(root), "--result", 'Work={"v": 2}', "--json")
    assert code == 0
    units = json.loads(out)["model"]["services"][0]["units"]
    assert [u["state"]["done"] for u in units] == [{"v": 2}, {"v": 2}]


@pytest.mark.parametrize("args, message", [
    (["--model", "/nonexistent.json"], "/nonexistent.json"),
    (["--model", "{bad}"], "{bad}"),
    (["--model", str(EXAMPLE), "--result", "novalue"], "TEMPLATE=JSON"),
    (["--model", str(EXAMPLE), "--outputs", "[1"], "--outputs: invalid JSON"),
])
def test_simulate_bad_input_is_one_clear_line(args, message, capsys):
    code, out, err = run_cli(capsys, "workflow", "simulate", *args)
    assert code == 2
    assert message in err and "Traceback" not in err


def test_simulate_bad_model_json_names_line(tmp_path, capsys):
    model = tmp_path / "m.json"
    model.write_text('{\n  "id": "x",\n  oops\n}')
    code, _, err = run_cli(capsys, "workflow", "simulate", "--model", str(model))
    assert code == 2 and f"{model}:3:" in err


def test_console_script_runs():
    proc = subprocess.run([sys.executable, "-m", "fornace.cli", "workflow", "check",
                           str(ROOT / "data" / "workflows")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_simulate_loads_neither_broker_nor_api(tmp_path):
    # start-up stays small: a workflow command imports only its own module
    script = ("import sys, io, contextlib\n"
              "from fornace.cli.main import main\n"
              "with contextlib.redirect_stdout(io.StringIO()):\n"
              f"    code = main(['workflow', 'simulate', '--model', {str(EXAMPLE)!r}, '--json'])\n"
              "print(code, sorted(m for m in ('kombu', 'fornace.api.app', 'fornace.conductor.executors.localcloud', "
              "'fornace.common.broker', 'fornace.conductor.jobs.hooks') "
              "if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert out.split("\n")[-2] == "0 []"


def test_simulate_json_rounds_arrive_in_order_with_their_outcomes(capsys):
    code, out, _ = run_cli(capsys, "workflow", "simulate", "--model", str(EXAMPLE), "--json")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == '{"rounds": ['
    document = json.loads(out)
    assert [r["round"] for r in document["rounds"]] == list(range(1, len(document["rounds"]) + 1))
    # each round was written after its actions ran: no action is left pending
    assert all(a["outcome"] == "success" for r in document["rounds"] for a in r["actions"])
    assert document["status"] == "success"


@pytest.mark.parametrize("command", ["conductor", "api", "up", "demo", "env", "workflow"])
def test_each_command_sees_every_option_group(command):
    # a command's module is the only one imported, but the options other
    # modules declare are all there (the conductor reads [database])
    from fornace.cli.main import build_conf
    conf = build_conf(command)
    for group, option in (("database", "connection"), ("conductor", "stacks"),
                          ("api", "state_dir"), ("agent", "work_dir"), ("engine", "max_rounds")):
        conf[group][option]  # raises NoSuchOptError when the group was not registered


def test_the_agent_command_has_its_own_options_only():
    """What a unit runs reads [DEFAULT] and [agent]; the server groups are not there."""
    import oslo_config.cfg as cfg

    from fornace.cli.main import build_conf
    conf = build_conf("agent")
    conf(["agent"], project="fornace", prog="fornace", default_config_files=[],
         default_config_dirs=[])
    assert conf.agent.work_dir and conf.input_queue == ""
    for group in ("database", "conductor", "api"):
        with pytest.raises(cfg.NoSuchOptError, match=f"no such option {group} in group"):
            conf[group]["connection" if group == "database" else "state_dir"]


# -- limits on operator input: one clear error, never a traceback ---------------

LONG_FILTER = ('<workflow>\n<rule match="$.services[?(@.port == ' + "9" * 5000 + ')]">\n'
               '<report text="x"/></rule></workflow>\n')


def test_check_reports_a_huge_filter_integer_at_its_line(tmp_path, capsys):
    write_catalog(tmp_path, {"w.xml": LONG_FILTER})
    code, out, err = run_cli(capsys, "workflow", "check", str(tmp_path / "workflows"))
    assert code == 1 and "Traceback" not in out + err
    [line] = out.splitlines()
    assert line.startswith(f"{tmp_path / 'workflows' / 'w.xml'}:2: bad filter ")
    assert "number of 5000 characters (at most 100)" in line and len(line) < 2000


def test_simulate_refuses_a_huge_filter_integer_with_exit_2(tmp_path, capsys):
    write_catalog(tmp_path, {"w.xml": LONG_FILTER})
    code, out, err = run_cli(capsys, "workflow", "simulate", "--model", str(EXAMPLE),
                             "--data", str(tmp_path))
    assert code == 2 and out == ""
    assert err.startswith(f"fornace: {tmp_path / 'workflows' / 'w.xml'}:2: bad filter ")


def test_check_reports_a_template_linked_out_of_the_catalog(tmp_path, capsys):
    root = write_catalog(tmp_path / "cat", {"w.xml": '<workflow>\n<rule match="$">\n'
                                                      '<update-cf-stack template="Evil"/>'
                                                      '</rule></workflow>\n'})
    secret = tmp_path / "secret.json"
    secret.write_text('{"Resources": {}}')
    (root / "templates" / "cf").mkdir(parents=True)
    (root / "templates" / "cf" / "Evil.template").symlink_to(secret)
    code, out, _ = run_cli(capsys, "workflow", "check", str(root / "workflows"))
    assert code == 1
    assert out.startswith(f"{root / 'workflows' / 'w.xml'}:3: template 'Evil': ")
    assert "leads outside the catalog" in out


DOCTYPE = ('<?xml version="1.0"?>\n<!DOCTYPE workflow SYSTEM "http://example.com/w.dtd" [\n'
           '  <!ENTITY passwd SYSTEM "file:///etc/passwd">\n  <!ENTITY greeting "hello">\n]>\n'
           '<workflow>\n  <rule match="$">\n    <report><parameter name="text">&greeting;'
           '</parameter></report>\n  </rule>\n</workflow>\n')


def test_check_warns_about_the_doctype_and_entities_it_ignored(tmp_path, capsys):
    write_catalog(tmp_path, {"w.xml": DOCTYPE})
    path = tmp_path / "workflows" / "w.xml"
    code, out, err = run_cli(capsys, "workflow", "check", str(path))
    assert code == 0   # safe: nothing was read; said, not failed
    assert out.splitlines() == [
        f"{path}:2: warning: DOCTYPE declaration ignored: its external DTD "
        f"'http://example.com/w.dtd' is not loaded (workflow files use no DTD)",
        f"{path}:3: warning: entity 'passwd' declared but never expanded (its external "
        f"content is not read)",
        f"{path}:4: warning: entity 'greeting' declared but never expanded",
        f"{path}:8: warning: entity reference &greeting; is left out of the text (entities "
        f"are never expanded)"]
    assert err == "no problems found (4 warning(s))\n"
    code, out, _ = run_cli(capsys, "workflow", "check", "--json", str(path))
    doc = json.loads(out)
    assert code == 0 and doc["problems"] == []
    assert [(w["file"], w["line"]) for w in doc["warnings"]] == [
        (str(path), 2), (str(path), 3), (str(path), 4), (str(path), 8)]
    assert doc["warnings"][2]["message"] == "entity 'greeting' declared but never expanded"


def _model_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "model.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, message", [
    ('{"id": "e",\n "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
     ":2: JSON nested deeper than 100 levels at column 106 ($.x[0][0]"),
    ('{"id": "e", "services": [{"port": ' + "9" * 5000 + "}]}",
     ":1: integer of 5000 digits at column 35 ($.services[0].port)"),
])
def test_simulate_refuses_a_model_over_the_limits_with_its_place(tmp_path, capsys, text,
                                                                  message):
    model = _model_file(tmp_path, text)
    code, out, err = run_cli(capsys, "workflow", "simulate", "--model", str(model))
    assert (code, out) == (2, "")
    assert err.startswith(f"fornace: {model}{message}") and "Traceback" not in err


def test_simulate_refuses_a_model_larger_than_max_model_bytes(tmp_path, capsys):
    conf = tmp_path / "f.conf"
    conf.write_text("[engine]\nmax_model_bytes = 2048\n")
    model = _model_file(tmp_path, json.dumps({"id": "e", "blob": "x" * 3000}))
    code, _, err = run_cli(capsys, "--config-file", str(conf), "workflow", "simulate",
                           "--model", str(model))
    assert code == 2
    assert err == (f"fornace: {model}: the model file is larger than 2048 bytes "
                   f"([engine] max_model_bytes)\n")


def test_simulate_refuses_deep_outputs(capsys):
    code, _, err = run_cli(capsys, "workflow", "simulate", "--model", str(EXAMPLE),
                           "--outputs", "[" * 5000 + "]" * 5000)
    assert code == 2 and err.startswith("fornace: --outputs: JSON nested deeper than 100 ")


GROWING = ('<workflow>\n  <rule id="grow" match="$.services[0].osImage">\n'
           '    <set path="name"><select path="name"/><select path="name"/></set>\n'
           '  </rule>\n</workflow>\n')


def test_simulate_stops_a_growing_value_with_a_report_naming_the_rule(tmp_path, capsys):
    write_catalog(tmp_path, {"w.xml": GROWING})
    code, out, _ = run_cli(capsys, "workflow", "simulate", "--model", str(EXAMPLE),
                           "--data", str(tmp_path), "--json")
    assert code == 1 and len(out) < 20 * 1024 * 1024
    doc = json.loads(out)
    assert doc["status"] == "error"
    [report] = doc["reports"]
    assert report["text"] == (
        f"Deployment stopped: {tmp_path / 'workflows' / 'w.xml'}:3: <set> of rule 'grow' would "
        f"write a value larger than 4194304 bytes as JSON ([engine] max_value_bytes) to "
        f"services.0.osImage.name")


def test_simulate_reports_a_deep_template_with_its_place(tmp_path, capsys):
    root = write_catalog(tmp_path, {"w.xml": '<workflow>\n<rule match="$"><mute/>\n'
                                             '<update-cf-stack template="Deep"/></rule>'
                                             '</workflow>\n'})
    (root / "templates" / "cf").mkdir(parents=True)
    deep = root / "templates" / "cf" / "Deep.template"
    deep.write_text('{"Resources": ' + "[" * 100_000 + "]" * 100_000 + "}")
    code, out, _ = run_cli(capsys, "workflow", "simulate", "--model", str(EXAMPLE),
                           "--data", str(root), "--json")
    assert code == 1
    [report] = json.loads(out)["reports"]
    assert f"{deep}:1: JSON nested deeper than 100 levels at column " in report["text"]
    assert "($.Resources[0][0]" in report["text"]
    code, out, _ = run_cli(capsys, "workflow", "check", str(root / "workflows"))
    assert code == 1 and f"{deep}:1: JSON nested deeper than 100 levels" in out


@pytest.mark.parametrize("model, message", [
    ({"id": "e1", "services": 5}, "$.services must be a list of services, not int"),
    ({"id": "e1", "services": ["web"]}, "$.services[0] must be an object, not str"),
    ({"id": "e1", "services": [{"id": "s", "units": {}}]},
     "$.services[0].units must be a list of units, not dict"),
    ({"id": "e1", "services": [{"id": "s", "units": [1]}]},
     "$.services[0].units[0] must be an object, not int"),
])
def test_simulate_refuses_a_model_that_is_no_environment(tmp_path, capsys, model, message):
    """Regression: a model whose services were not a list ran (and succeeded) on nothing."""
    path = tmp_path / "model.json"
    path.write_text(json.dumps(model))
    code, out, err = run_cli(capsys, "workflow", "simulate", "--model", str(path))
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.strip() == f"fornace: {path}: {message}"


def test_check_reports_a_set_whose_path_names_no_field(tmp_path, capsys):
    write_catalog(tmp_path, {"w.xml": '<workflow>\n<rule match="$">\n'
                                      '<set path="">1</set>\n<set path="::">1</set>\n'
                                      '<set path="#v">1</set></rule></workflow>\n'})
    code, out, _ = run_cli(capsys, "workflow", "check", str(tmp_path / "workflows"))
    assert code == 1
    assert [line.split(": ", 1)[1] for line in out.splitlines()] == [
        "<set>: path '' names no field to set", "<set>: path '::' names no field to set"]


SIGNING = """<workflow>
  <rule match="$.services[?(not @.temp.told)]" desc="tell">
    <set path="temp.told"><true/></set>
    <set path="temp.copy"><select path="signature"/></set>
    <report entity="service"><parameter name="id"><select path="id"/></parameter>
      <parameter name="text">signed with <select path="signature"/></parameter></report>
  </rule>
</workflow>
"""


def test_simulate_masks_a_field_the_catalogs_types_declare_secret(tmp_path, capsys):
    """``signature`` is named like no password: the catalog's ``writeOnly`` says it is one."""
    root = write_catalog(tmp_path / "cat", {"w.xml": SIGNING})
    document = json.loads((ROOT / "data" / "types.json").read_text())
    document["types"]["signedNote"] = {"extends": "linuxService", "schema": {
        "properties": {"signature": {"type": "string", "writeOnly": True}}}}
    (root / "types.json").write_text(json.dumps(document))
    model = tmp_path / "env.json"
    model.write_text(json.dumps({"id": "E", "services": [
        {"id": "S", "type": "signedNote", "name": "memo", "signature": "s1gn3d-by-me",
         "units": []}]}))
    for json_flag in ((), ("--json",)):
        code, out, err = run_cli(capsys, "workflow", "simulate", "--model", str(model),
                                 "--data", str(root), *json_flag)
        assert code == 0, err
        assert "s1gn3d-by-me" not in out + err and "signed with ***" in out
