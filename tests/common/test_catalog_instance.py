"""A type's ``instance`` keys (types.json): checked when the catalog is read,
inherited key by key along ``extends``, shown to the workflows as each
service's ``temp.instance``; and a catalog file's problems all found at once."""
from __future__ import annotations

import json

import pytest

from fornace.common.catalog import (CatalogError, builtin_catalog, catalog_problems,
                                    catalog_with, with_type_views)


def test_instance_keys_are_inherited_key_by_key():
    catalog = catalog_with(builtin_catalog(), {
        "bigLinux": {"extends": "linuxService", "instance": {"template": "BigInstance"}},
        "bigFarm": {"extends": "bigLinux", "instance": {"loadBalancer": True}}})
    assert catalog.instance("bigFarm") == {"template": "BigInstance", "image": "linux",
                                           "loadBalancer": True}
    assert catalog.instance("linuxWebServer") == {"template": "LinuxInstance", "image": "linux"}
    assert catalog.instance("msSqlServer") == {"template": "WindowsInstance", "image": "windows"}
    assert catalog.instance("nope") == {}


@pytest.mark.parametrize("instance, message", [
    ([], "type 'x': 'instance' must be an object"),
    ({"flavor": "big"}, "type 'x': 'instance' has an unknown key 'flavor' "
                        "(known: image, loadBalancer, template)"),
    ({"template": " "}, "type 'x': 'instance' 'template' must be a non-empty string"),
    ({"loadBalancer": "yes"}, "type 'x': 'instance' 'loadBalancer' must be true or false"),
])
def test_a_bad_instance_is_refused_naming_the_type(instance, message):
    with pytest.raises(CatalogError) as caught:
        catalog_with(None, {"x": {"instance": instance}})
    assert caught.value.message == message
    assert caught.value.steps[:3] == ["types", "x", "instance"]


def test_each_service_sees_its_types_instance_keys_and_nothing_else():
    model = {"services": [
        {"type": "linuxAppFarm", "temp": {"kept": 1, "instance": {"image": "forged"}}},
        {"type": "webServer"},
        # a service of a type without instance keys gets none, whatever it held
        {"type": "nope", "temp": {"instance": {"image": "linux"}}},
        "not a service", {"no": "type"}]}
    with_type_views(model, builtin_catalog())
    assert model["services"][0]["temp"] == {
        "kept": 1, "instance": {"template": "LinuxInstance", "image": "linux",
                                "loadBalancer": True}}
    assert model["services"][1]["temp"]["instance"]["image"] == "windows"
    assert model["services"][2]["temp"] == {}
    # a copy: a workflow writing into it changes no catalog
    model["services"][0]["temp"]["instance"]["image"] = "changed"
    assert builtin_catalog().instance("linuxAppFarm")["image"] == "linux"
    assert with_type_views({"services": {}}, builtin_catalog()) == {"services": {}}
    assert with_type_views({"services": [{"type": "webServer"}]}, None) == {
        "services": [{"type": "webServer"}]}


def test_every_problem_of_a_catalog_file_is_found(tmp_path):
    path = tmp_path / "types.json"
    path.write_text(json.dumps({"types": {
        "a": {"extends": "nowhere"},
        "b": {"extends": "a"},                         # left out with a: not reported
        "c": {"colour": 1},
        "d": {"extends": "linuxService", "schema": {"properties": {"n": {"type": "nmber"}}}},
        "e": {"extends": "linuxService"}}}, indent=1))
    problems = catalog_problems(path, builtin_catalog())
    assert [p.split(": ", 1)[0] for p in problems] == [f"{path}:{n}" for n in (9, 4, 17)]
    assert problems[0].endswith("type 'c': unknown key(s) colour")
    assert problems[1].endswith("type 'a' extends unknown type 'nowhere'")
    assert "type 'd': schema.properties.n.type: 'nmber'" in problems[2]
    path.write_text(json.dumps({"types": {"e": {"extends": "linuxService"}}}))
    assert catalog_problems(path, builtin_catalog()) == []
    path.write_text("[")
    assert len(catalog_problems(path)) == 1
