"""Parameters of lifecycle actions: defaults, every error naming its parameter,
and the units an execute_operation selects (Cloudify semantics)."""
from __future__ import annotations

import json

import pytest

from fornace.common import contract
from fornace.common.actionparams import ActionError, check_parameters, select_units
from fornace.common.catalog import load_catalog

TYPES = {
    "service": {"abstract": True, "operations": {"restart": None}},
    "linuxService": {"extends": "service", "abstract": True,
                     "operations": {"backup": {"template": "Backup"}}},
    "linuxWebServer": {"extends": "linuxService",
                       "operations": {"reload": {"template": "Reload"}}},
    "linuxApp": {"extends": "linuxService"},
    "windowsService": {"extends": "service", "abstract": True},
    "webServer": {"extends": "windowsService"},
}


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    path = tmp_path_factory.mktemp("catalog") / "types.json"
    path.write_text(json.dumps({"types": TYPES}))
    return load_catalog(path)


def model():
    return {"id": "E1", "services": [
        {"id": "web", "name": "site", "type": "linuxWebServer",
         "units": [{"id": "w1"}, {"id": "w2"}]},
        {"id": "app", "name": "app", "type": "linuxApp", "units": [{"id": "a1"}]},
        {"id": "iis", "name": "iis", "?": {"type": "webServer"}, "units": [{"id": "i1"}]},
    ]}


def check(action, parameters, catalog):
    return check_parameters(action, parameters, model(), catalog)


def error(action, parameters, catalog):
    with pytest.raises(ActionError) as caught:
        check(action, parameters, catalog)
    return str(caught.value)


# -- defaults -------------------------------------------------------------------------

@pytest.mark.parametrize("action", ["deploy", "install", "plan"])
def test_change_detection_defaults_to_evaluate(catalog, action):
    assert check(action, {}, catalog) == {"change_detection": "evaluate"}
    for value in contract.CHANGE_DETECTION:
        assert check(action, {"change_detection": value}, catalog) == {"change_detection": value}
    message = error(action, {"change_detection": "sometimes"}, catalog)
    assert "'change_detection'" in message and "evaluate, always, skip" in message


@pytest.mark.parametrize("action", ["uninstall", "check", "delete"])
def test_actions_without_parameters(catalog, action):
    assert check(action, {}, catalog) == {}
    assert "unknown parameter 'force'" in error(action, {"force": True}, catalog)


def test_scale_defaults_and_checks(catalog):
    assert check("scale", {"node_id": "web"}, catalog) == {
        "node_id": "web", "delta": 1, "scale_compute": True}
    assert check("scale", {"node_id": "web", "delta": -1, "scale_compute": False}, catalog) == {
        "node_id": "web", "delta": -1, "scale_compute": False}
    assert "'node_id' is required" in error("scale", {}, catalog)
    assert "'node_id' names no service" in error("scale", {"node_id": "w1"}, catalog)
    assert "'delta' must be an integer, got a boolean" in error(
        "scale", {"node_id": "web", "delta": True}, catalog)
    assert "'delta' must be an integer, got a number" in error(
        "scale", {"node_id": "web", "delta": 1.5}, catalog)
    assert "'scale_compute' must be true or false" in error(
        "scale", {"node_id": "web", "scale_compute": "yes"}, catalog)


def test_scale_in_keeps_one_unit_and_says_how_many_there_are(catalog):
    message = error("scale", {"node_id": "web", "delta": -2}, catalog)
    assert "'delta'" in message and "site (web)" in message
    assert "it has 2" in message and "at least 1" in message
    assert "it has 1" in error("scale", {"node_id": "app", "delta": -1}, catalog)


def test_heal_needs_a_unit_of_the_model(catalog):
    assert check("heal", {"node_instance_id": "a1"}, catalog) == {"node_instance_id": "a1"}
    assert "'node_instance_id' is required" in error("heal", {}, catalog)
    assert "'node_instance_id' names no unit" in error(
        "heal", {"node_instance_id": "web"}, catalog)
    assert "'node_instance_id' must be a string" in error("heal", {"node_instance_id": 3},
                                                          catalog)


def test_execute_operation_defaults(catalog):
    assert check("execute_operation", {"operation": "restart"}, catalog) == {
        "operation": "restart", "operation_kwargs": {}, "allow_kwargs_override": None,
        "run_by_dependency_order": False, "type_names": [], "node_ids": [],
        "node_instance_ids": []}


@pytest.mark.parametrize("parameters, expected", [
    ({}, "'operation' is required"),
    ({"operation": ""}, "'operation' must not be empty"),
    ({"operation": 5}, "'operation' must be a string"),
    ({"operation": "x", "operation_kwargs": []}, "'operation_kwargs' must be an object"),
    ({"operation": "x", "allow_kwargs_override": "no"},
     "'allow_kwargs_override' must be true, false or null"),
    ({"operation": "x", "run_by_dependency_order": None},
     "'run_by_dependency_order' must be true or false"),
    ({"operation": "x", "type_names": "linuxApp"}, "'type_names' must be a list of strings"),
    ({"operation": "x", "type_names": ["teapot"]},
     "'type_names' names no service type of the catalog: 'teapot'"),
    ({"operation": "x", "node_ids": ["w1"]}, "'node_ids' names no service"),
    ({"operation": "x", "node_ids": [1]}, "'node_ids' must be a list of strings"),
    ({"operation": "x", "node_instance_ids": ["web"]}, "'node_instance_ids' names no unit"),
    ({"operation": "x", "nodes": []}, "unknown parameter 'nodes'"),
])
def test_execute_operation_errors_name_the_parameter(catalog, parameters, expected):
    message = error("execute_operation", parameters, catalog)
    assert message.startswith("action execute_operation: ")
    assert expected in message


def test_unknown_action_and_non_object_parameters(catalog):
    assert "unknown action 'explode'" in error("explode", {}, catalog)
    assert "must be an object, got a list" in error("check", [], catalog)


# -- selecting units --------------------------------------------------------------------

def units(parameters, catalog):
    checked = check("execute_operation", parameters, catalog)
    return [unit["id"] for _service, unit in select_units(checked, model(), catalog)]


def test_no_filter_selects_every_unit(catalog):
    assert units({"operation": "restart"}, catalog) == ["w1", "w2", "a1", "i1"]


def test_type_names_match_subtypes_recursively(catalog):
    assert units({"operation": "restart", "type_names": ["linuxService"]},
                 catalog) == ["w1", "w2", "a1"]
    assert units({"operation": "restart", "type_names": ["service"]},
                 catalog) == ["w1", "w2", "a1", "i1"]
    assert units({"operation": "restart", "type_names": ["webServer", "linuxApp"]},
                 catalog) == ["a1", "i1"]


def test_every_filter_applies_together(catalog):
    assert units({"operation": "restart", "node_ids": ["web", "app"],
                  "node_instance_ids": ["w2", "a1", "i1"], "type_names": ["linuxWebServer"]},
                 catalog) == ["w2"]
    assert units({"operation": "restart", "node_ids": ["app"],
                  "node_instance_ids": ["w1"]}, catalog) == []


def test_a_selected_unit_without_the_operation_is_an_error(catalog):
    assert units({"operation": "backup", "type_names": ["linuxService"]},
                 catalog) == ["w1", "w2", "a1"]
    with pytest.raises(ActionError,
                       match="service iis of type 'webServer' has no operation 'backup'") as caught:
        units({"operation": "backup"}, catalog)
    message = str(caught.value)
    assert "iis" in message and "'webServer'" in message and "'backup'" in message
    assert "it has: restart" in message
    with pytest.raises(ActionError, match="'linuxApp' has no operation 'reload'"):
        units({"operation": "reload", "node_ids": ["web", "app"]}, catalog)
    # filtered out before the check: no error
    assert units({"operation": "reload", "node_ids": ["web"]}, catalog) == ["w1", "w2"]


def test_a_service_of_an_unknown_type_has_no_operation(catalog):
    odd = model()
    odd["services"].append({"id": "x", "type": "teapot", "units": [{"id": "x1"}]})
    checked = check_parameters("execute_operation", {"operation": "restart"}, odd, catalog)
    with pytest.raises(ActionError, match="'teapot', which the catalog does not know"):
        select_units(checked, odd, catalog)


@pytest.mark.parametrize("parameters,name", [
    ({"operation": "restart", "operation_kwargs": {"command": "echo a\x00b"}},
     "operation_kwargs"),
    ({"operation": "restart", "operation_kwargs": {"k\x00": 1}}, "operation_kwargs"),
    ({"operation": "re\x00start"}, "operation"),
])
def test_a_nul_anywhere_in_a_parameter_is_refused_naming_it(catalog, parameters, name):
    """The database's text columns refuse a NUL, and an action's reports may
    quote its parameters: refused with the others' errors, never stored."""
    assert error("execute_operation", parameters, catalog) == \
        f"action execute_operation: parameter {name!r} must not contain NUL (U+0000)"
