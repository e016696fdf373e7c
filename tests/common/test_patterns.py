"""Patterns from catalogs and packages: RE2, JSON Schema's semantics, refusals with
a reason, and the catalog naming the line of a pattern it refuses."""
from __future__ import annotations

import json

import pytest

from fornace.common.catalog import CatalogError, builtin_catalog, load_catalog
from fornace.common.patterns import (MAX_MATCH_COST, MAX_PROGRAM_SIZE, PatternError,
                                     compile_pattern)


def test_a_backtracking_bomb_is_a_plain_no():
    bomb = compile_pattern("^(a+)+$")     # Python's re: 2^n steps on a's and a '!'
    assert bomb.search("a" * 30) is True
    assert bomb.search("a" * 60_000 + "!") is False


def test_pattern_is_an_unanchored_search_and_dollar_is_the_very_end():
    assert compile_pattern("[0-9]").search("port 80") is True
    assert compile_pattern("^[0-9]+$").search("port 80") is False
    # Python's $ also matches before a final newline: "web\n" would pass as a name
    assert compile_pattern("^[a-z]+$").search("web\n") is False
    assert compile_pattern("^[a-z]+$").search("web") is True


@pytest.mark.parametrize("pattern,reason", [
    ("([a-", "missing ]"),
    (r"(a)\1", "no backreferences or look-around"),
    ("(?=a)b", "no backreferences or look-around"),
    (r"a\Z", r"\z, not \Z"),
    ("(.*){1000}", f"at most {MAX_PROGRAM_SIZE}"),
    ("a" * 1001, "at most 1000"),
    (42, "must be a string"),
])
def test_what_re2_will_not_run_is_refused_with_a_reason(pattern, reason):
    with pytest.raises(PatternError, match=r"pattern") as caught:
        compile_pattern(pattern)
    assert reason in str(caught.value)


def test_a_text_past_the_cost_of_one_match_is_not_matched():
    pattern = compile_pattern(r"(?:\w+\s?){1,150}x")
    assert pattern.max_chars == MAX_MATCH_COST // pattern.size < 200
    assert pattern.search("a" * (pattern.max_chars - 1) + "x") is True
    with pytest.raises(PatternError, match="too long to match"):
        pattern.search("a" * pattern.max_chars + "x")


def _catalog_file(tmp_path, pattern):
    document = {"types": {"note": {
        "extends": "linuxService",
        "schema": {"properties": {"text": {"type": "string", "pattern": pattern}}}}}}
    path = tmp_path / "types.json"
    path.write_text(json.dumps(document, indent=2))
    return path


@pytest.mark.parametrize("pattern", ["([a-", r"(a)\1"])
def test_the_catalog_refuses_a_pattern_naming_its_line(tmp_path, pattern):
    path = _catalog_file(tmp_path, pattern)
    with pytest.raises(CatalogError) as caught:
        load_catalog(path, base=builtin_catalog())
    assert str(caught.value).startswith(
        f"{path}:9: type 'note': schema.properties.text.pattern: invalid pattern ")
    assert caught.value.line == 9   # the line of "pattern"


def test_the_catalog_takes_a_pattern_re2_runs(tmp_path):
    catalog = load_catalog(_catalog_file(tmp_path, "^[a-z]+$"), base=builtin_catalog())
    assert catalog.service_types["note"].all_fields["text"].schema["pattern"] == "^[a-z]+$"


def test_a_catalog_nested_too_deep_is_refused_naming_the_file(tmp_path):
    deep: dict = {"type": "string"}
    for _ in range(400):
        deep = {"type": "object", "properties": {"x": deep}}
    path = _catalog_file(tmp_path, "a")
    document = json.loads(path.read_text())
    document["types"]["note"]["schema"]["properties"]["deep"] = deep
    path.write_text(json.dumps(document))
    with pytest.raises(CatalogError, match=r"types\.json:1: JSON nested deeper than 100 "
                                           r"levels at column \d+ \(\$\.types\.note\.schema"):
        load_catalog(path, base=builtin_catalog())
    with pytest.raises(CatalogError, match="nested deeper than 30 levels"):
        load_catalog(path, base=builtin_catalog(), max_depth=30)
