"""Reading and measuring JSON under limits: errors with places, never Python's own."""
from __future__ import annotations

import json

import pytest

from fornace.common import contract
from fornace.common.jsonlimits import (HARD_MAX_DEPTH, JsonLimitError, line_of, loads, measure,
                                       read_bounded)


def test_deep_json_is_refused_before_parsing_with_its_place():
    text = '{"id": "e",\n "x": [{"y": ' + "[" * 100_000 + "]" * 100_000 + "}]}"
    with pytest.raises(JsonLimitError,
                       match="^JSON nested deeper than 50 levels at line 2, column 61 ") as caught:
        loads(text, max_depth=50)
    error = caught.value
    assert (error.kind, error.file, error.line) == ("depth", None, None)
    assert str(error).startswith("JSON nested deeper than 50 levels at line 2, column ")
    assert error.path.startswith("$.x[0].y[0][0]") and "(50 levels)" in error.path


def test_the_place_is_named_with_the_source():
    with pytest.raises(JsonLimitError,
                       match=r"^m\.json:2: JSON nested deeper than 2 levels") as caught:
        loads('{"a":\n [[[[', max_depth=2, source="m.json")
    assert str(caught.value) == "m.json:2: JSON nested deeper than 2 levels at column 3 ($.a[0])"


def test_brackets_inside_strings_do_not_count():
    text = json.dumps({"a": "[" * 1000, "b": ['{"[', "\\\"[[["]})
    assert loads(text, max_depth=2) == json.loads(text)


@pytest.mark.parametrize("text, depth", [
    (json.dumps({"a": ["\\", "\\\"[{", "\u005c[[", {"b": "]]}}"}]}), 3),
    ('{"a": [[[[[["x"]]]]]], "b": {"c": {"d": [1]}}}', 7),
    ("[" * 17 + "]" * 17, 17),            # beyond the quick passes: the exact scan
    ('[[["unterminated [[[[', 3),        # a string the quick passes cannot read
    ('[[]]]]]', 2), ('[[[]', 3)])         # not JSON: left to the parser
def test_the_quick_depth_check_agrees_with_the_exact_scan(text, depth):
    """Every text deeper than the limit is refused where the exact scan refuses
    it; shallow enough, it reaches the parser."""
    for limit in (depth - 1, depth):
        try:
            loads(text, max_depth=limit)
        except JsonLimitError as exc:
            assert limit < depth and exc.kind == "depth", (limit, exc)
        except json.JSONDecodeError:
            assert limit >= depth
        else:
            assert limit >= depth


def test_nesting_up_to_the_limit_is_read():
    assert loads("[" * 10 + "]" * 10, max_depth=10) == json.loads("[" * 10 + "]" * 10)
    with pytest.raises(JsonLimitError, match="JSON nested deeper than 10 levels"):
        loads("[" * 11 + "]" * 11, max_depth=10)


def test_no_reader_goes_past_the_hard_limit():
    text = "[" * (HARD_MAX_DEPTH + 1) + "]" * (HARD_MAX_DEPTH + 1)
    with pytest.raises(JsonLimitError, match=f"deeper than {HARD_MAX_DEPTH} levels"):
        loads(text, max_depth=10_000)


def test_a_huge_integer_is_an_error_with_its_place():
    with pytest.raises(JsonLimitError,
                       match="^integer of 5000 digits at line 1, column 5021 ") as caught:
        loads('{"a": {"b": [1, "' + "9" * 5000 + '", ' + "9" * 5000 + "]}}")
    assert caught.value.kind == "digits"
    assert caught.value.path == "$.a.b[2]"
    assert "integer of 5000 digits at line 1, column " in str(caught.value)


def test_syntax_errors_stay_json_decode_errors():
    with pytest.raises(json.JSONDecodeError, match="^Expecting value: line 1 column 7"):
        loads('{"a": ')


def test_read_bounded_refuses_a_larger_file(tmp_path):
    path = tmp_path / "f.json"
    path.write_text("x" * 101)
    assert read_bounded(path, 101) == b"x" * 101
    with pytest.raises(JsonLimitError, match="file is larger than 100 bytes") as caught:
        read_bounded(path, 100)
    assert caught.value.file == str(path)


def test_measure_counts_about_the_json_text():
    value = {"name": "web", "units": [{"id": "u1", "up": True}, {"id": "u2", "n": None}],
             "port": 8080}
    size = measure(value, max_bytes=10_000, max_depth=10)
    assert abs(size - len(json.dumps(value))) < len(json.dumps(value)) // 5


def test_measure_stops_at_the_size_limit_even_for_shared_parts():
    value: list = ["leaf"]
    for _ in range(500):   # 2**500 leaves as JSON, 500 lists in memory
        value = [value, value]
    with pytest.raises(JsonLimitError, match="larger than 100000 bytes as JSON") as caught:
        measure(value, max_bytes=100_000, max_depth=1000)
    assert caught.value.kind == "size"


def test_measure_names_the_place_too_deep_or_forbidden():
    deep: dict = {}
    inner = deep
    for _ in range(5):
        inner["k"] = {}
        inner = inner["k"]
    with pytest.raises(JsonLimitError, match=r"nested deeper than 3 levels \(at \$\.k\.k\.k\)"):
        measure(deep, max_bytes=1000, max_depth=3)
    holder = {"a": [{"b": inner}]}
    with pytest.raises(JsonLimitError, match=r"contains the place it is written to "
                                             r"\(at \$\.a\[0\]\.b\)") as caught:
        measure(holder, max_bytes=1000, max_depth=10, forbidden={id(inner)})
    assert caught.value.kind == "cycle"


def test_a_peer_message_nested_too_deeply_is_a_contract_error():
    body = '{"id": "e", "tenant_id": "t", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(contract.ContractError, match="task message: JSON nested deeper than "):
        contract.parse_task(body)


def test_the_line_of_a_place_named_by_its_path():
    text = json.dumps({"types": {"a": {"pattern": "p"}, "b": [1, {"c": 2}]}}, indent=2)
    lines = text.splitlines()
    assert lines[line_of(text, ["types", "a", "pattern"]) - 1].strip() == '"pattern": "p"'
    assert lines[line_of(text, ["types", "b", 1, "c"]) - 1].strip() == '"c": 2'
    assert lines[line_of(text, ["types", "b", 0]) - 1].strip() == "1,"
    assert line_of(text, ["types", "pattern"]) is None     # a key below is not the place
    assert line_of(text, []) == 1
