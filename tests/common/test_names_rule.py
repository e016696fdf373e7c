"""The one rule of ids and names (``fornace.common.names``), and the message
contract, the package archive and the API agreeing with it."""
from __future__ import annotations

import pytest

from fornace.common import contract
from fornace.common.packages import archive

SAMPLES = ["a", "A1", "0", "uuid-0f8fad5b-d9cb-469f-a165-70867728950e", "Svc_1.web-2",
           "x" * 64, "x" * 65, "", " ", "-a", ".a", "..", "a/b", "a b", "a\x00", "a\n",
           "caf\u00e9", "\u6771\u4eac", "a:b", "a@b", "a\u2028"]


def node_event(node_id: str) -> dict:
    return {"environment_id": "e1", "job_id": "j1", "kind": "tasks", "tasks": [],
            "nodes": {node_id: {"state": "created", "local": "ok"}}}


def contract_takes_node(node_id: str) -> bool:
    try:
        contract.parse_job_event(node_event(node_id))
    except contract.ContractError:
        return False
    return True


@pytest.mark.parametrize("value", SAMPLES)
def test_the_contract_takes_exactly_the_ids_the_rule_takes(value):
    from fornace.common import names
    assert contract_takes_node(value) == (names.id_problem(value) is None)


@pytest.mark.parametrize("value", ["a\x00b", "a/b", "a b", "caf\u00e9", "..", "-x"])
def test_the_contract_refuses_node_ids_with_characters_ids_cannot_hold(value):
    """A NUL reaches no database; '/' splits a service path; non-ASCII ids could
    make agent queue names longer than a broker takes."""
    assert not contract_takes_node(value)


def test_a_task_event_targets_an_id_the_rule_takes_or_none():
    good = {"change_id": "c1", "target": "u-1", "status": "ok"}
    contract.task_events_body("e1", "j1", [good, {**good, "change_id": "c2", "target": None}])
    with pytest.raises(contract.ContractError) as caught:
        contract.task_events_body("e1", "j1", [good, {**good, "change_id": "c2",
                                                      "target": "u" * 300}])
    assert caught.value.field == "tasks[1].target"
    assert "u" * 65 not in str(caught.value)   # the value is not quoted


@pytest.mark.parametrize("value", ["web", "K\u00fcche \u6771\u4eac (prod)", "n" * 255])
def test_names_take_any_printable_text(value):
    from fornace.common import names
    assert names.name_problem(value) is None


@pytest.mark.parametrize("value, words", [
    ("", "empty"), ("   ", "empty"), ("n" * 256, "at most 255"),
    ("a\x00b", "U+0000"), ("a\nb", "U+000A"), ("a\x7f", "U+007F"), ("a\x9b", "U+009B"),
    ("a\u2028b", "U+2028"), ("a\u202eb", "U+202E"), ("a\ud800", "U+D800"),
])
def test_names_refuse_blank_long_and_control_characters(value, words):
    from fornace.common import names
    problem = names.name_problem(value)
    assert problem is not None and words in problem, problem


def test_package_names_are_ids():
    from fornace.common import names
    assert archive.NAME.pattern == names.ID.pattern
    for value in SAMPLES:
        assert bool(archive.NAME.fullmatch(value)) == (names.id_problem(value) is None)
