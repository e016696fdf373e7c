"""The JSONPath dialect of rule ``match`` and ``select-all``.

Navigation (``$``, ``.a``, ``[*]``, ``[n]``, ``..``) is walked by
:mod:`fornace.conductor.dsl.navigation` (jsonpath-ng parses and walks what that does
not know); filters ``[?(…)]`` by our own safe compiler
(:mod:`fornace.conductor.dsl.filters`).  A
query is split once into steps and cached, so the thousands of evaluations a
deployment makes never parse again.

Murano 0.2 semantics kept here:

* a leading ``/`` queries from the model root, each leading ``:`` from one
  level above the cursor;
* in a rule's ``match``, ``$`` stands for a one-element list holding the
  cursor object, so ``$[?(expr)]`` tests the object itself and ``$.a`` is
  its field ``a``;
* ``select-all``/``select-single`` run their JSONPath on the object found,
  unwrapped: from a unit, ``:$[*].state.hostname`` moves up to the units
  list and gives every unit's hostname (``compile_query(text, wrap=False)``);
* a filter on a list tests its items, on a dict its values.

A query built at run time from text and values (``compile_query(text,
values=...)``, :mod:`fornace.conductor.dsl.slots`) is split and compiled from
its text alone; each value is bound where its marker stands, as data.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Callable, Iterable, NamedTuple

from jsonpath_ng import parse as jsonpath_parse
from jsonpath_ng.exceptions import JsonPathLexerError, JsonPathParserError
from jsonpath_ng.jsonpath import Fields, Index

from fornace.common.cursor import Cursor, start_cursor
from fornace.common.errors import ExpressionError, shortened
from fornace.conductor.dsl.filters import compile_filter
from fornace.conductor.dsl.navigation import compile_bound_segment, compile_segment, holds_values
from fornace.conductor.dsl.slots import Slots

Step = Callable[[list[Cursor]], list[Cursor]]


class Part(NamedTuple):
    """What one step of a query is, for explanations (never used to evaluate):
    its text (``.services``, ``[?(@.type == 'x')]``), the filter expression of
    a filter step (None: navigation) with the values bound to its markers, and
    how many levels below the query's start the objects it yields (or, for a
    filter, tests) are (None: it cannot be said, after a ``..``)."""

    text: str
    expression: str | None
    values: tuple[str, ...]
    depth: int | None


class Query:
    """A compiled query: a prefix (root/up) and a list of steps.

    ``self_part`` and ``parts`` describe ``first_on_self`` and ``steps`` (one
    part per step) for explanations (:mod:`fornace.conductor.dsl.clauses`,
    :mod:`fornace.conductor.dsl.why`); evaluating a
    query never reads them."""

    __slots__ = ("text", "prefix", "first_on_self", "steps", "self_part", "parts")

    def __init__(self, text: str, prefix: str, first_on_self: Step | None,
                 steps: list[Step], self_part: Part | None = None,
                 parts: tuple[Part, ...] = ()) -> None:
        self.text = text
        self.prefix = prefix
        self.first_on_self = first_on_self
        self.steps = steps
        self.self_part = self_part
        self.parts = parts

    @property
    def filters(self) -> tuple[Part, ...]:
        """The filter parts (the self filter first), in the order they test."""
        every = ((self.self_part,) if self.self_part is not None else ()) + self.parts
        return tuple(part for part in every if part.expression is not None)

    @property
    def depth(self) -> int | None:
        """How many levels below the start the matches are (None: unknown)."""
        return self.parts[-1].depth if self.parts else 0

    def find(self, cursor: Cursor) -> list[Cursor]:
        """All matches of the query run at ``cursor``, in document order."""
        return self.find_from(self.start(cursor))

    def start(self, cursor: Cursor) -> Cursor:
        """Where the query starts: the cursor, an ancestor or the root."""
        return start_cursor(cursor, self.prefix)[0]

    def find_from(self, start: Cursor) -> list[Cursor]:
        """All matches below ``start`` (the prefix already applied)."""
        current = [start]
        if self.first_on_self is not None:
            current = self.first_on_self(current)
        for step in self.steps:
            if not current:
                break
            current = step(current)
        return current


@functools.lru_cache(maxsize=4096)
def compile_query(text: str, wrap: bool = True, values: tuple[str, ...] = ()) -> Query:
    """Compile a rule match (``wrap``) or a select-all path; errors name the expression.

    ``wrap``: the first ``[...]`` after ``$`` applies to ``[cursor object]``
    (rules, Murano 0.2); without it, to the object itself (selects).
    ``values``: bound to the markers of ``text`` as data.
    """
    if values:
        slots = Slots(values)
        try:
            return _compile(text, wrap, slots)
        except ExpressionError as exc:   # say it with the values in place
            raise ExpressionError(exc.reason, slots.render(text)) from None
    return _compile(text, wrap, None)


def _compile(text: str, wrap: bool, slots: Slots | None) -> Query:
    body = text.strip()
    prefix_len = 1 if body.startswith("/") else len(body) - len(body.lstrip(":"))
    prefix, body = body[:prefix_len], body[prefix_len:].strip()
    if not body.startswith("$"):
        if not body:
            raise ExpressionError("empty JSONPath", text)
        body = "$." + body if not body.startswith("[") else "$" + body
    segments = _segments(body[1:], text, slots)
    first_on_self, self_part = None, None
    if wrap and segments and segments[0].startswith("["):
        first = segments.pop(0)
        first_on_self = _self_step(first, text, slots)
        self_part = _part(first, 0, slots)
    parts: list[Part] = []
    steps = _steps(segments, text, slots, parts)
    return Query(text if slots is None else slots.render(text), prefix, first_on_self,
                 steps, self_part, tuple(parts))


def _part(segment: str, depth: int | None, slots: Slots | None) -> Part:
    shown = segment if slots is None else slots.render(segment)
    if _is_filter(segment):
        bound = holds_values(segment, slots)
        return Part(shown, segment[3:-2], slots.values if bound else (), depth)
    return Part(shown, None, (), depth)


def _levels(segment: str) -> int | None:
    """How many levels down one navigation segment goes (None: ``..``, any)."""
    return None if segment.startswith("..") else 1


def _column(rest: str, index: int, slots: Slots | None) -> int:
    """The column (after ``$``) of ``rest[index]``, values counted as rendered."""
    return index + 2 if slots is None else slots.column("$" + rest, index + 2)


def _segments(rest: str, text: str, slots: Slots | None = None) -> list[str]:
    """Split what follows ``$`` into ``.name``/``..name``/``[...]`` segments."""
    segments: list[str] = []
    index = 0
    while index < len(rest):
        char = rest[index]
        if char == "[":
            end = _bracket_end(rest, index, text, slots)
            segments.append(rest[index:end])
            index = end
        elif char == ".":
            match = re.compile(r"\.\.?(\*|[^.\[\s]+)?").match(rest, index)
            if not match or not match.group(1):
                raise ExpressionError(f"a name must follow '.' at column "
                                      f"{_column(rest, index, slots)}", text)
            segments.append(match.group(0))
            index = match.end()
        elif char.isspace():
            index += 1
        else:
            raise ExpressionError(f"unexpected {char!r} at column "
                                  f"{_column(rest, index, slots)}", text)
    return segments


def _bracket_end(rest: str, start: int, text: str, slots: Slots | None = None) -> int:
    depth = 0
    quote = None
    index = start
    while index < len(rest):
        char = rest[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
            if depth == 0:
                if char != "]":
                    raise ExpressionError(f"unbalanced ')' at column "
                                          f"{_column(rest, index, slots)}", text)
                return index + 1
        index += 1
    raise ExpressionError("unclosed '['", text)


def _is_filter(segment: str) -> bool:
    return segment.startswith("[?(") and segment.endswith(")]")


def _filter_predicate(segment: str, text: str,
                      slots: Slots | None = None) -> Callable[[Any], Any]:
    if segment.startswith("[(") or (segment.startswith("[?") and not _is_filter(segment)):
        raise ExpressionError("only [?(…)] filters are supported", text)
    bound = holds_values(segment, slots)
    try:
        return compile_filter(segment[3:-2], slots.values if bound else ())
    except ExpressionError as exc:
        shown = shortened(slots.render(segment) if bound else segment)
        raise ExpressionError(f"bad filter {shown}: {exc.reason}", text) from None


def _self_step(segment: str, text: str, slots: Slots | None = None) -> Step:
    """The first ``[...]`` after ``$`` applies to the list ``[cursor]``."""
    if segment.startswith("[?"):
        predicate = _filter_predicate(segment, text, slots)
        return lambda cursors: [c for c in cursors if predicate(c.value)]
    if holds_values(segment, slots):
        raise ExpressionError(f"a value cannot stand in {slots.render(segment)} right "
                              f"after '$'", text)
    _check_digits(segment, text)
    inner = segment[1:-1].strip()
    if inner in ("*", "0", "-1"):
        return lambda cursors: cursors
    if re.fullmatch(r"-?\d+", inner):
        return lambda cursors: []
    raise ExpressionError(f"unsupported selector {segment} after '$'", text)


def _steps(segments: list[str], text: str, slots: Slots | None = None,
           parts: list[Part] | None = None) -> list[Step]:
    """The steps of ``segments``; ``parts`` (given) gets one :class:`Part` per step."""
    steps: list[Step] = []
    navigation: list[str] = []
    found: list[Part] = [] if parts is None else parts
    depth: int | None = 0

    def down(levels: int | None) -> int | None:
        return None if depth is None or levels is None else depth + levels

    def flush() -> None:
        nonlocal navigation, depth
        if navigation:
            steps.append(_navigation_step(navigation, text))
            for segment in navigation:
                depth = down(_levels(segment))
            found.append(_part("".join(navigation), depth, slots))
            navigation = []

    for segment in segments:
        if segment.startswith("[?") or segment.startswith("[("):
            flush()
            steps.append(_filter_step(_filter_predicate(segment, text, slots)))
            depth = down(1)
            found.append(_part(segment, depth, slots))
        elif holds_values(segment, slots):
            flush()
            steps.append(_bound_step(segment, text, slots))
            depth = down(_levels(segment))
            found.append(_part(segment, depth, slots))
        else:
            _check_digits(segment, text)
            navigation.append(segment)
    flush()
    return steps


_LONG_NUMBER = re.compile(r"\d{101,}")


def _check_digits(segment: str, text: str) -> None:
    """Python refuses integers of more than 4300 digits; no index or name needs 101."""
    if _LONG_NUMBER.search(segment):
        raise ExpressionError("an index, slice bound or name has more than 100 digits", text)


def _bound_step(segment: str, text: str, slots: Slots) -> Step:
    """A navigation segment holding values (:func:`compile_bound_segment`)."""
    find = compile_bound_segment(segment, slots)
    if find is None:
        raise ExpressionError(f"a value can only stand for a name, an index or a quoted "
                              f"key, not in {slots.render(segment)}", text)

    def step(cursors: list[Cursor]) -> list[Cursor]:
        found: list[Cursor] = []
        for cursor in cursors:
            found.extend(find(cursor))
        return found
    return step


def _navigation_step(segments: list[str], text: str) -> Step:
    """Plain segments are walked by :mod:`fornace.conductor.dsl.navigation`, others by jsonpath-ng.

    A plain segment is checked where it is recognised (a name, ``*``, an
    integer index); jsonpath-ng parses (and checks) the rest.
    """
    finders = [compile_segment(segment) for segment in segments]
    if any(find is None for find in finders):
        return _jsonpath_step(_parse("".join(segments), text))

    def step(cursors: list[Cursor]) -> list[Cursor]:
        for find in finders:
            found: list[Cursor] = []
            for cursor in cursors:
                found.extend(find(cursor))
            cursors = found
            if not cursors:
                break
        return cursors
    return step


def _filter_step(predicate: Callable[[Any], Any]) -> Step:
    def step(cursors: list[Cursor]) -> list[Cursor]:
        found = []
        for cursor in cursors:
            value = cursor.value
            if isinstance(value, list):
                items: Iterable = enumerate(value)
            elif isinstance(value, dict):
                items = value.items()
            else:
                continue
            for key, item in items:
                if predicate(item):
                    found.append(Cursor(item, key, cursor))
        return found
    return step


def _parse(segments: str, text: str) -> Any:
    try:
        return jsonpath_parse("$" + segments)
    except (JsonPathLexerError, JsonPathParserError, Exception) as exc:
        raise ExpressionError(f"bad JSONPath {segments!r}: {exc}", text) from None


def _jsonpath_step(expression: Any) -> Step:
    def step(cursors: list[Cursor]) -> list[Cursor]:
        found = []
        for cursor in cursors:
            known: dict[int, Cursor] = {}
            for datum in expression.find(cursor.value):
                found.append(_to_cursor(datum, cursor, known))
        return found
    return step


def _to_cursor(datum: Any, start: Cursor, known: dict[int, Cursor]) -> Cursor:
    """Turn a jsonpath-ng datum chain into a cursor chain below ``start``."""
    cached = known.get(id(datum))
    if cached is not None:
        return cached
    if datum.context is None:
        cursor = start
    else:
        parent = _to_cursor(datum.context, start, known)
        path = datum.path
        if isinstance(path, Index):
            key: Any = path.indices[0] if hasattr(path, "indices") else path.index
            if key < 0:
                key += len(parent.value)
        elif isinstance(path, Fields):
            key = path.fields[0]
        else:
            key = str(path)
        cursor = Cursor(datum.value, key, parent)
    known[id(datum)] = cursor
    return cursor
