"""The plain JSONPath steps, walked directly on cursors.

Rules search the model on every pass, so the steps almost every match uses
(``.name``, ``..name``, ``.*``, ``..*``, ``[*]``, ``[n]``) are walked here
without building jsonpath-ng's datum chains: a 1000-unit deployment spent
most of its query time creating and converting those.  The result is the
one jsonpath-ng gives, in the same order (``..`` is a pre-order walk that
tests a node before its children, children in document order); anything
else (quoted names, unions, slices, reserved words) is parsed and walked by
jsonpath-ng (:mod:`fornace.conductor.dsl.query` decides).
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

from fornace.common.cursor import Cursor
from fornace.conductor.dsl.slots import MARKERS, Slots

Find = Callable[[Cursor], Sequence[Cursor]]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED = frozenset({"where", "wherenot", "parent", "this"})
_INDEX = re.compile(r"\[\s*(-?\d{1,100})\s*\]\Z")   # longer: jsonpath-ng says no
_BOUND_INDEX = re.compile(r"-?\d{1,100}\Z")
_ALONE = re.compile(r"\[\s*([\ue000-\uf8ff])\s*\]\Z")
_QUOTED = re.compile(r"""\[\s*(['"])([^'"\\]*)\1\s*\]\Z""")


def compile_segment(segment: str) -> Find | None:
    """A finder for one segment (``.a``, ``..a``, ``[*]``…), or None if not plain."""
    if segment.startswith(".."):
        child = _child(segment[2:])
        return None if child is None else _descendants(child)
    if segment.startswith("."):
        return _child(segment[1:])
    if segment.replace(" ", "") == "[*]":
        return children
    match = _INDEX.match(segment)
    return _index(int(match.group(1))) if match else None


def compile_bound_segment(segment: str, slots: Slots) -> Find | None:
    """A finder for a segment holding values (``.<v>``, ``..a<v>``, ``[<v>]``,
    ``['a<v>']``): each value is part of a name, or an index, as it is -- never
    a wildcard, a filter or a slice.  None for any other place of a value."""
    if segment.startswith(".."):
        name = segment[2:]
        return _descendants(_field(slots.render(name))) if name else None
    if segment.startswith("."):
        return _field(slots.render(segment[1:]))
    alone = _ALONE.match(segment)
    if alone:
        value = slots.fill(alone.group(1))
        return _index(int(value)) if _BOUND_INDEX.match(value) else _field(value)
    quoted = _QUOTED.match(segment)
    if quoted:
        return _field(slots.render(quoted.group(2)))
    return None


def holds_values(segment: str, slots: Slots | None) -> bool:
    """Does ``segment`` hold a marker bound to a value?"""
    return slots is not None and MARKERS.search(segment) is not None and slots.holds(segment)


def _child(name: str) -> Find | None:
    if name == "*":
        return children
    if not _NAME.match(name) or name in _RESERVED:
        return None
    return _field(name)


def children(cursor: Cursor) -> list[Cursor]:
    """Every member of an object or item of a list (``*``)."""
    value = cursor.value
    if isinstance(value, dict):
        return [Cursor(item, key, cursor) for key, item in value.items()]
    if isinstance(value, list):
        return [Cursor(item, index, cursor) for index, item in enumerate(value)]
    return []


def _field(name: str) -> Find:
    def find(cursor: Cursor) -> Sequence[Cursor]:
        value = cursor.value
        if isinstance(value, dict) and name in value:
            return (Cursor(value[name], name, cursor),)
        return ()
    return find


def _index(index: int) -> Find:
    def find(cursor: Cursor) -> Sequence[Cursor]:
        value = cursor.value
        if isinstance(value, list) and -len(value) <= index < len(value):
            key = index if index >= 0 else index + len(value)
            return (Cursor(value[key], key, cursor),)
        return ()
    return find


def _descendants(find: Find) -> Find:
    """``..``: ``find`` at the start and at every object and list below it.

    Scalars are not visited: no finder matches anything at a scalar (``*``
    matches them as members of their parent).
    """
    def walk(start: Cursor) -> list[Cursor]:
        found: list[Cursor] = []
        stack = [start]
        while stack:
            cursor = stack.pop()
            found.extend(find(cursor))
            value = cursor.value
            items = (value.items() if isinstance(value, dict)
                     else enumerate(value) if isinstance(value, list) else ())
            below = [Cursor(item, key, cursor) for key, item in items
                     if isinstance(item, (dict, list))]
            below.reverse()
            stack.extend(below)
        return found
    return walk
