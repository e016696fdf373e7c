"""The lifecycle operations of the type catalog (data/types.json), checked statically.

* every service type of the API is in the catalog, with the operations the
  lifecycle actions use, documented in its ``doc`` (or an ancestor's);
* every template an operation or an unlink step names exists, builds with
  ``build_plan`` into a plan the agent accepts, and has a placeholder for
  each input;
* every path an input, ``unit`` or ``when`` reads exists for the type: a
  field of its service or unit (api/specs.py), or a ``state`` key the
  workflows set on it (data/workflows/*.xml);
* on the example environments, deployed by the simulated cloud, every
  operation renders at every unit: no input is missing, and the agent that
  runs it is a unit's or its farm's load balancer's.
"""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

import pytest

from fornace.agent.plan import parse_plan
from fornace.api.specs import SERVICE_TYPES
from fornace.cli.main import main
from fornace.common.catalog import Operation, load_catalog, render, truthy, unit_cursor
from fornace.conductor.plans import build_plan
from fornace.conductor.templates import TemplateStore

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data"
EXAMPLES = DATA / "examples"
CATALOG = load_catalog(DATA / "types.json")
STORE = TemplateStore(DATA)
CONCRETE = sorted(name for name, info in CATALOG.types.items() if not info.abstract)
LINUX = ("linuxWebServer", "linuxWebServerFarm", "linuxApp", "linuxAppFarm")
WINDOWS = ("activeDirectory", "webServer", "aspNetApp", "webServerFarm", "aspNetAppFarm",
           "msSqlServer", "msSqlClusterServer")
FIELD = re.compile(r"\{([^{}|]+)(?:\|([^{}]*))?\}")


def operations(type_name: str) -> Iterator[tuple[str, Operation]]:
    """(name, operation) of a type's implemented operations and unlink steps."""
    for name in CATALOG.operation_names(type_name):
        operation = CATALOG.operation(type_name, name)
        if operation is not None:
            yield name, operation
    for index, operation in enumerate(CATALOG.unlink(type_name)):
        yield f"unlink[{index}]", operation


def templates() -> set[str]:
    return {op.template for name in CATALOG.types for _, op in operations(name)}


def paths(value: Any) -> Iterator[str]:
    """The paths an input template reads."""
    if isinstance(value, dict):
        for item in value.values():
            yield from paths(item)
    elif isinstance(value, list):
        for item in value:
            yield from paths(item)
    elif isinstance(value, str):
        for match in FIELD.finditer(value):
            yield match.group(1).strip()


# -- what the types have ----------------------------------------------------------------

def test_the_catalog_has_every_service_type_of_the_api():
    assert set(CONCRETE) == set(SERVICE_TYPES) == set(LINUX) | set(WINDOWS)


@pytest.mark.parametrize("type_name", CONCRETE)
def test_every_type_has_its_lifecycle_operations(type_name):
    names = set(CATALOG.operation_names(type_name))
    assert {"check", "stop", "start", "restart"} <= names
    for name in ("check", "stop", "start", "restart"):
        assert CATALOG.operation(type_name, name).implemented
    if type_name in LINUX:
        assert CATALOG.operation(type_name, "run").inputs["command"] is None  # a kwarg
    assert CATALOG.operation(type_name, "monitor") is None     # declared, does nothing
    unlink = CATALOG.unlink(type_name)
    if type_name.endswith("Farm") and type_name in LINUX:
        assert [(op.template, op.unit, op.when) for op in unlink] == [
            ("Linux/DeregisterBackend", "{::id}-proxy", "state.registered")]
        assert CATALOG.operation(type_name, "check_balancer").unit == "{::id}-proxy"
    elif type_name in WINDOWS and type_name != "activeDirectory":
        assert [(op.template, op.unit, op.when) for op in unlink] == [
            ("Windows/LeaveDomain", None, "state.domain")]
    else:
        assert unlink == []


@pytest.mark.parametrize("type_name", sorted(CATALOG.types))
def test_every_operation_is_documented(type_name):
    docs = " ".join(CATALOG.types[name].doc for name in CATALOG.ancestry(type_name))
    assert CATALOG.types[type_name].doc.strip()
    for name in CATALOG.operation_names(type_name):
        assert re.search(rf"\b{name}\b", docs), f"{type_name}: {name} is not in its doc"
    if CATALOG.unlink(type_name):
        assert "unlink" in docs


# -- templates --------------------------------------------------------------------------

@pytest.mark.parametrize("template", sorted(templates()))
def test_every_template_exists_and_builds_a_plan_the_agent_takes(template):
    plan = build_plan(STORE, template, {})
    plan["ID"] = "check"
    parsed = parse_plan(json.loads(json.dumps(plan)))
    assert parsed.commands
    if template.startswith("Linux/"):
        assert plan["FormatVersion"] == "2.0"
        assert "fornace_unit.py" in plan["ScriptNames"]
        for name, content in parsed.scripts:        # every helper a script imports ships
            for module in re.findall(rb"^import (fornace_\w+) as", content, re.M):
                assert module.decode() + ".py" in plan["ScriptNames"], (template, name)
    else:
        assert "FormatVersion" not in plan and plan["ScriptNames"][0] == "WindowsCore.ps1"


@pytest.mark.parametrize("type_name", sorted(CATALOG.types))
def test_every_input_is_a_placeholder_of_its_template(type_name):
    for name, operation in operations(type_name):
        text = STORE.agent_path(operation.template).read_text()
        wanted = set(re.findall(r'"\$([A-Za-z_]\w*)"', text))
        assert set(operation.inputs) <= wanted, \
            f"{type_name} {name}: {sorted(set(operation.inputs) - wanted)} not in " \
            f"{operation.template}"


# -- paths ------------------------------------------------------------------------------

def _match_text(rule: ET.Element) -> str:
    if rule.get("match") is not None:
        return rule.get("match")
    for parameter in rule.findall("parameter"):
        if parameter.get("name") == "match":
            return "".join(parameter.itertext())
    return ""


def _skeleton(match: str) -> str:
    """A match without its filters: ``$.services[?(...)].units[?(...)]`` -> ``$.services.units``."""
    out, depth = [], 0
    for char in match:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif depth == 0:
            out.append(char)
    return "".join(out).strip()


def _types_in(match: str) -> set[str] | None:
    """The service types a match filters on (None: it does not say)."""
    if re.search(r"services\[\*\]", match):
        return set(CONCRETE)
    found = set()
    for clause in re.findall(r"@\.type\s*(?:==\s*'[^']*'|in\s*\([^)]*\))", match):
        found.update(re.findall(r"'([^']*)'", clause))
    # the types' instance keys (temp.instance, what the conductor shows each service)
    for key, value in re.findall(r"@\.temp\.instance\.(\w+)(?:\s*==\s*'([^']*)')?", match):
        found.update(name for name in CONCRETE
                     if CATALOG.instance(name).get(key) == (value or True))
    return found or None


def workflow_state() -> dict[tuple[str, str], dict[str, set[str]]]:
    """(type, 'unit' | 'service') -> state key -> the keys of its value when it is a map."""
    state: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))

    def visit(element: ET.Element, types: set[str], level: str | None) -> None:
        for child in element:
            if child.tag == "rule":
                match = _match_text(child)
                skeleton = _skeleton(match)
                own = _types_in(match)
                child_level = "unit" if skeleton.endswith("units") else \
                    "service" if skeleton.endswith("services") else None
                visit(child, own if own is not None else types, child_level)
                continue
            if child.tag == "set" and level is not None:
                path = child.get("path") or ""
                where = level
                if path.startswith("::") and level == "unit":
                    path, where = path[2:], "service"
                if path.startswith("state."):
                    key = path.split(".")[1]
                    mapped = {m.get("name") for m in child.iter("mapping")}
                    for type_name in types:
                        state[(type_name, where)][key].update(mapped)
            visit(child, types, level)

    for file in sorted((DATA / "workflows").glob("*.xml")):
        visit(ET.parse(file).getroot(), set(), None)
    return state


STATE = workflow_state()


def path_problem(type_name: str, path: str) -> str | None:
    spec = SERVICE_TYPES[type_name]
    if path.startswith("::"):
        level, rest, fields = "service", path[2:], spec.service_fields()
    elif path[:1] in (":", "/"):
        return "only unit (no prefix) and service (::) paths are expected"
    else:
        level, rest, fields = "unit", path, spec.unit_field_specs()
    parts = rest.split(".")
    if parts[0] != "state":
        return None if len(parts) == 1 and (parts[0] in fields or parts[0] == "id") else \
            f"no {level} field {rest!r}"
    keys = STATE[(type_name, level)]
    if len(parts) < 2 or parts[1] not in keys:
        return f"no workflow sets {level} state {'.'.join(parts[1:2])!r}"
    if len(parts) > 2 and (len(parts) > 3 or parts[2] not in keys[parts[1]]):
        return f"{level} state {parts[1]!r} has no {'.'.join(parts[2:])!r}"
    return None


def test_the_workflow_state_keys_are_found():
    assert {"hostname", "address", "registered", "appDeployed"} <= set(STATE[("linuxAppFarm",
                                                                               "unit")])
    assert STATE[("linuxApp", "service")]["appSettings"] >= {"port", "startCommand", "env"}
    assert {"address", "proxyPort", "proxyHostname"} <= set(STATE[("linuxWebServerFarm",
                                                                    "service")])
    assert "domain" in STATE[("msSqlClusterServer", "unit")]
    assert "proxyPort" not in STATE[("linuxApp", "service")]
    assert path_problem("linuxApp", "::state.appSettings.nope") is not None
    assert path_problem("linuxWebServer", "::state.proxyPort") is not None
    assert path_problem("webServer", "::repository") is not None


@pytest.mark.parametrize("type_name", CONCRETE)
def test_inputs_only_read_paths_the_type_has(type_name):
    problems = []
    for name, operation in operations(type_name):
        found = list(paths(operation.inputs)) + list(paths(operation.unit or ""))
        if operation.when:
            found.append(operation.when)
        for path in found:
            problem = path_problem(type_name, path)
            if problem:
                problems.append(f"{name}: {path}: {problem}")
    assert problems == []


# -- rendered on deployed examples -------------------------------------------------------

OUTPUTS = {"windows-domain.json": {"lb-farm0001": "10.0.0.100", "dc1": "10.0.0.10",
                                   "dc2": "10.0.0.11", "shop1": "10.0.0.21",
                                   "shop2": "10.0.0.22", "portal1": "10.0.0.31",
                                   "sql1": "10.0.0.41"},
           "linux-farm.json": {"hello1": "10.0.1.1", "hello2": "10.0.1.2",
                               "hello1-lb": "10.0.1.10", "site1": "10.0.2.1",
                               "site2": "10.0.2.2", "site1-lb": "10.0.2.10"},
           "linux-app.json": {"app1": "10.0.0.1", "app2": "10.0.0.2"},
           "linux-web.json": {"web1": "10.0.3.1", "web2": "10.0.3.2"}}
OPTIONAL = {"env"}     # inputs that may be null: an app without extra variables


def deployed(capsys, name: str) -> dict[str, Any]:
    code = main(["workflow", "simulate", "--model", str(EXAMPLES / name), "--json",
                 "--outputs", json.dumps(OUTPUTS[name]),
                 "--result", 'Windows/GetDnsIp="10.0.0.10"'])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["status"] == "success"
    return doc["model"]


@pytest.mark.parametrize("example", sorted(OUTPUTS))
def test_every_operation_renders_on_the_deployed_example(capsys, example):
    model = deployed(capsys, example)
    seen = set()
    for service in model["services"]:
        for unit in service["units"]:
            cursor = unit_cursor(model, service["id"], unit["id"])
            for name, operation in operations(service["type"]):
                seen.add(service["type"])
                where = f"{service['type']} {unit['id']} {name}"
                mappings = render(operation.inputs, cursor)
                missing = [key for key, value in mappings.items()
                           if value is None and operation.inputs[key] is not None
                           and key not in OPTIONAL]
                assert missing == [], f"{where}: nothing at the paths of {missing}"
                assert all(value != "" for key, value in mappings.items()
                           if operation.inputs[key] != ""), where
                target = str(render(operation.unit, cursor)) if operation.unit else unit["id"]
                if target != unit["id"]:
                    assert target == f"{service['id']}-proxy" and \
                        service["state"]["proxyHostname"], where
                if name.startswith("unlink"):
                    assert truthy(cursor, operation.when), f"{where}: not linked"
                build_plan(STORE, operation.template, mappings)
    assert seen
