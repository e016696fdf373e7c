"""fornace.conductor.dsl.navigation walks plain JSONPath steps exactly as jsonpath-ng does."""
from __future__ import annotations

import itertools

import pytest

from fornace.common.cursor import Cursor
from fornace.conductor.dsl.navigation import compile_segment
from fornace.conductor.dsl.query import _jsonpath_step, _parse
from enginekit import sample_model

DOCS = [
    sample_model(),
    {"a": [{"b": 1}, {"b": [2, {"b": 3}]}, 4], "b": {"a": {"b": None}}, "c": "text"},
    [[1, 2], {"a": [3]}, "x", None],
    {"units": {"units": [{"units": []}]}, "k": [{"units": 1}]},
    "scalar",
]
SEGMENTS = [".services", ".units", "..units", ".a", "..b", ".b", ".*", "..*", "[*]", "[0]",
            "[1]", "[-1]", "[ 2 ]", "[-9]", ".id", "..id", ".c", ".nothing"]


def _paths(cursors: list[Cursor]) -> list[tuple]:
    return [(tuple(c.path()), repr(c.value)) for c in cursors]


@pytest.mark.parametrize("length,choices", [(1, SEGMENTS), (2, SEGMENTS), (3, SEGMENTS[:10])])
def test_same_matches_and_order_as_jsonpath_ng(length, choices):
    checked = 0
    for segments in itertools.product(choices, repeat=length):
        finders = [compile_segment(s) for s in segments]
        assert all(f is not None for f in finders), segments
        reference = _jsonpath_step(_parse("".join(segments), "test"))
        for doc in DOCS:
            cursors = [Cursor(doc)]
            for find in finders:
                cursors = [found for c in cursors for found in find(c)]
            assert _paths(cursors) == _paths(reference([Cursor(doc)])), (segments, doc)
            checked += 1
    assert checked == len(choices) ** length * len(DOCS)


@pytest.mark.parametrize("segment", ["['a']", "[0:2]", "[0,1]", ".where", ".`this`", ".a-b",
                                     "..['x']", ".1"])
def test_other_segments_are_left_to_jsonpath_ng(segment):
    assert compile_segment(segment) is None
