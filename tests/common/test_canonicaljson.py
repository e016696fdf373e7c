"""The one JSON text digests are taken of."""
from __future__ import annotations

import json
import json.encoder

import pytest

from fornace.common import canonicaljson
from fornace.common.canonicaljson import canonical_json

VALUES = [
    {}, [], "", 0, -1.5, None, True, "é ✓ \u2028 \x00 \"quoted\" \\",
    {"b": 1, "a": [3, {"z": None, "y": [True, False]}], "ä": "ü"},
    {"n": float("nan"), "i": float("-inf"), "big": 10 ** 30, "f": 1e-7},
    {"obj": complex(1, 2), "nested": {"set": frozenset()}},
    [[[[{"deep": list(range(20))}]]]],
]


@pytest.mark.parametrize("value", VALUES)
def test_the_text_is_json_dumps_sorted_and_compact(value) -> None:
    expected = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    assert canonical_json(value) == expected


def test_without_the_c_encoder_the_standard_one_serves(monkeypatch) -> None:
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    assert canonicaljson._c_encoder() is None
    assert canonicaljson._standard({"b": 1, "a": 2}) == '{"a":2,"b":1}'


def test_a_c_encoder_that_answers_otherwise_is_not_used(monkeypatch) -> None:
    monkeypatch.setattr(canonicaljson, "_standard", lambda value: json.dumps(value, indent=1))
    assert canonicaljson._c_encoder() is None


def test_keys_that_cannot_be_sorted_are_refused_as_by_json_dumps() -> None:
    with pytest.raises(TypeError):
        canonical_json({1: "a", "b": 2})
