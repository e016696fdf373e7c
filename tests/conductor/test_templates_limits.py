"""The template store reads only inside its catalog, and only what the limits allow."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from fornace.common.errors import TemplateError
from fornace.conductor.dsl.limits import Limits
from fornace.conductor.templates import TemplateStore


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    root = tmp_path / "catalog"
    for folder in ("templates/cf", "templates/agent/scripts", "templates/agent-config",
                   "init-scripts"):
        (root / folder).mkdir(parents=True)
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret = tmp_path / "secret.template"
    secret.write_text('{"Resources": {"stolen": {}}, "Scripts": [], "Commands": []}')
    return secret


def test_a_link_out_of_the_catalog_is_refused_for_every_kind_of_file(catalog, outside):
    (catalog / "templates/cf/Evil.template").symlink_to(outside)
    (catalog / "templates/agent/Evil.template").symlink_to(outside)
    (catalog / "templates/agent/scripts/evil.sh").symlink_to(outside)
    (catalog / "templates/agent-config/Evil.template").symlink_to(outside)
    (catalog / "init-scripts/evil.sh").symlink_to(outside)
    store = TemplateStore(catalog, fallback=None)
    for read in (lambda: store.heat_template("Evil"), lambda: store.agent_template("Evil"),
                 lambda: store.script("evil.sh"), lambda: store.agent_config("Evil"),
                 lambda: store.init_script("evil.sh")):
        with pytest.raises(TemplateError, match="leads outside the catalog") as caught:
            read()
        assert caught.value.file.startswith(str(catalog))
        assert "stolen" not in str(caught.value)


def test_a_linked_folder_out_of_the_catalog_is_refused(catalog, tmp_path, outside):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "T.template").write_text(outside.read_text())
    (catalog / "templates/cf/linked").symlink_to(elsewhere)
    with pytest.raises(TemplateError, match="leads outside the catalog"):
        TemplateStore(catalog, fallback=None).heat_template("linked/T")


def test_links_inside_the_catalog_and_a_linked_catalog_are_fine(catalog, tmp_path):
    (catalog / "shared.template").write_text('{"Resources": {"a": {}}}')
    (catalog / "templates/cf/Shared.template").symlink_to(catalog / "shared.template")
    alias = tmp_path / "alias"
    alias.symlink_to(catalog)
    for root in (catalog, alias):
        assert TemplateStore(root, fallback=None).heat_template("Shared") == \
            {"Resources": {"a": {}}}


def test_the_builtin_fallback_files_still_serve(catalog):
    store = TemplateStore(catalog)   # Fornace's own catalog behind an empty one
    assert "%BROKER_URL%" in store.agent_config("Default")
    assert store.init_script("init.sh").startswith("#!/bin/sh")


def test_a_template_larger_than_the_limit_is_refused(catalog):
    body = {"Resources": {"a": {"Properties": {"x": "y" * 5000}}}}
    (catalog / "templates/cf/Big.template").write_text(json.dumps(body))
    (catalog / "templates/agent/scripts/big.sh").write_text("#" * 5000)
    store = TemplateStore(catalog, fallback=None, limits=Limits(max_template_bytes=4096))
    with pytest.raises(TemplateError, match=r"larger than 4096 bytes \(\[engine\] "
                                            r"max_template_bytes\)"):
        store.heat_template("Big")
    with pytest.raises(TemplateError, match="max_template_bytes"):
        store.script("big.sh")
    assert TemplateStore(catalog, fallback=None).heat_template("Big") == body


def test_a_deeply_nested_template_is_an_error_with_its_place(catalog):
    path = catalog / "templates/cf/Deep.template"
    path.write_text('{"Resources":\n {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}")
    with pytest.raises(TemplateError,
                       match=r"Deep\.template:2: JSON nested deeper than 100 levels") as caught:
        TemplateStore(catalog, fallback=None).heat_template("Deep")
    error = caught.value
    assert (error.file, error.line) == (str(path), 2)
    assert "nested deeper than 100 levels" in str(error)
    assert "$.Resources.a[0][0]" in str(error) and "max_json_depth" in str(error)


def test_a_huge_integer_in_a_template_is_an_error_with_its_place(catalog):
    path = catalog / "templates/agent/Long.template"
    path.write_text('{"Scripts": [], "Commands": [{"Timeout": ' + "7" * 5000 + "}]}")
    with pytest.raises(TemplateError, match=r"integer of 5000 digits at column \d+ "
                                            r"\(\$\.Commands\[0\]\.Timeout\)"):
        TemplateStore(catalog, fallback=None).agent_template("Long")
