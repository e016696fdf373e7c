"""A filter expression clause by clause, to say why it held or not.

The engine evaluates a filter (``[?( ... )]``) through the closures of
:mod:`fornace.conductor.dsl.filters`, which keep nothing of the text.  To
explain a match (``fornace why``, a trace's cause), the same text is parsed
again by the same parser, which here also keeps a tree of its ``or``,
``and`` and ``not`` terms: each with its source text, its compiled closure
and the ``@`` paths a test reads.  Nothing of this runs while a deployment
evaluates its rules; a tree is built only when an explanation is asked for
(and cached).

:func:`failing` names the tests that made a false filter false (the first
false term of an ``and``, every term of an ``or``, what a ``not`` negated),
:func:`holding` those that made a true one true, each as a line such as
``not @.state.kvDeployed is false: state.kvDeployed = true``.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Callable

from fornace.common.cursor import Cursor
from fornace.common.errors import ExpressionError
from fornace.common.secrets import MASK, is_secret_key
from fornace.conductor.dsl.filters import _all_of, _any_of, _negation, _Operand, _Parser
from fornace.conductor.dsl.query import Query
from fornace.conductor.dsl.slots import Slots

ABSENT = "absent"
SHOWN_CHARS = 60     # a value read, shown at most this long


@dataclass(frozen=True)
class Clause:
    """One term of a filter: ``or``/``and``/``not`` of ``parts``, or a ``test``."""

    text: str
    kind: str                              # "or", "and", "not", "test"
    fn: Callable[[Any], Any]
    parts: tuple["Clause", ...] = ()
    paths: tuple[tuple[str, ...], ...] = ()  # the @ paths a test reads


class _ClauseParser(_Parser):
    """The filters' parser, keeping the source span of every ``or``/``and``/``not``."""

    def __init__(self, expression: str, slots: Slots | None = None) -> None:
        super().__init__(expression, slots)
        self.clauses: dict[int, Clause] = {}
        self.kept: list[_Operand] = []     # so that no id is reused meanwhile

    def _text(self, start: int, end: int) -> str:
        first, after = self.tokens[start], self.tokens[min(end, len(self.tokens) - 1)]
        text = self.expression[first.col - 1:after.col - 1].strip()
        return self.slots.render(text) if self.slots is not None else text

    def clause(self, operand: _Operand, start: int, end: int) -> Clause:
        found = self.clauses.get(id(operand))
        if found is not None:
            return found
        paths = tuple(token.value for token in self.tokens[start:end] if token.kind == "path")
        return self._keep(operand, Clause(self._text(start, end), "test", operand.fn,
                                          paths=paths))

    def _keep(self, operand: _Operand, clause: Clause) -> Clause:
        self.kept.append(operand)
        self.clauses[id(operand)] = clause
        return clause

    def _terms(self, word: str, parse: Callable[[], _Operand]) -> tuple[list, list[Clause], int]:
        start = self.pos
        operands, clauses = [], []
        while True:
            before = self.pos
            operand = parse()
            operands.append(operand)
            clauses.append(self.clause(operand, before, self.pos))
            if not self.at("name", word):
                return operands, clauses, start
            self.next()

    def _joined(self, word: str, parse: Callable[[], _Operand],
                join: Callable[[list[_Operand]], _Operand]) -> _Operand:
        """Terms of ``parse`` joined by ``word`` (``or``/``and``), kept as one clause."""
        operands, clauses, start = self._terms(word, parse)
        if len(operands) == 1:
            return operands[0]
        result = join(operands)
        self._keep(result, Clause(self._text(start, self.pos), word, result.fn, tuple(clauses)))
        return result

    def parse_or(self) -> _Operand:
        return self._joined("or", self.parse_and, _any_of)

    def parse_and(self) -> _Operand:
        return self._joined("and", self.parse_not, _all_of)

    def parse_not(self) -> _Operand:
        if not self.at("name", "not"):
            return super().parse_not()
        start = self.pos
        self.nested(self.next())
        inner_start = self.pos
        inner = self.parse_not()
        self.depth -= 1
        result = _negation(inner)
        part = self.clause(inner, inner_start, self.pos)
        self._keep(result, Clause(self._text(start, self.pos), "not", result.fn, (part,)))
        return result


@functools.lru_cache(maxsize=1024)
def clause_tree(expression: str, values: tuple[str, ...] = ()) -> Clause:
    """The clauses of a filter expression (ExpressionError as :func:`compile_filter`)."""
    parser = _ClauseParser(expression, Slots(values) if values else None)
    operand = parser.parse()
    return parser.clause(operand, 0, len(parser.tokens) - 1)


@functools.lru_cache(maxsize=1024)
def paths_read(expression: str, values: tuple[str, ...] = ()) -> tuple[tuple[str, ...], ...]:
    """Every ``@`` path the expression reads, once each, in order."""
    found: dict[tuple[str, ...], None] = {}

    def walk(clause: Clause) -> None:
        for path in clause.paths:
            found.setdefault(path, None)
        for part in clause.parts:
            walk(part)
    walk(clause_tree(expression, values))
    return tuple(found)


_MISSING = object()


def read(node: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` below ``node``, or ``_MISSING`` (unlike the filters,
    which read None there, an explanation tells a missing key from a null)."""
    for key in path:
        if isinstance(node, dict):
            if key not in node:
                return _MISSING
            node = node[key]
        elif isinstance(node, (list, tuple)) and key.isdigit():
            if int(key) >= len(node):
                return _MISSING
            node = node[int(key)]
        else:
            return _MISSING
    return node


def shown(value: Any, path: tuple[str, ...] = ()) -> str:
    """A value read, for a reader: ``absent``, ``true``, ``'linuxApp'``; a value
    at a secret-named key masked, long ones cut."""
    if value is _MISSING:
        return ABSENT
    if path and value is not None and is_secret_key(path[-1]):
        return repr(MASK)
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str,
                                                                  ensure_ascii=False)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 1] + "\u2026"


def reads(clause: Clause, node: Any) -> list[str]:
    """``state.kvDeployed = true`` for each path a test reads of ``node``."""
    return [f"{'.'.join(path) or '@'} = {shown(read(node, path), path)}"
            for path in clause.paths]


def _line(clause: Clause, node: Any, value: bool) -> str:
    """``not @.a is false: a = true`` (a ``not`` of a test says what its test read)."""
    tested = clause.parts[0] if clause.kind == "not" else clause
    said = ", ".join(reads(tested, node))
    return f"{clause.text} is {'true' if value else 'false'}" + (f": {said}" if said else "")


def failing(clause: Clause, node: Any) -> list[str]:
    """Why ``clause`` is false for ``node``: the tests that made it so."""
    if clause.kind == "and":
        for part in clause.parts:
            if not part.fn(node):
                return failing(part, node)
    if clause.kind == "or":
        return [line for part in clause.parts for line in failing(part, node)]
    if clause.kind == "not":
        return holding(clause.parts[0], node) if clause.parts[0].kind != "test" \
            else [_line(clause, node, False)]
    return [_line(clause, node, False)]


def holding(clause: Clause, node: Any) -> list[str]:
    """Why ``clause`` is true for ``node``: the tests that made it so."""
    if clause.kind == "and":
        return [line for part in clause.parts for line in holding(part, node)]
    if clause.kind == "or":
        for part in clause.parts:
            if part.fn(node):
                return holding(part, node)
    if clause.kind == "not":
        return failing(clause.parts[0], node) if clause.parts[0].kind != "test" \
            else [_line(clause, node, True)]
    return [_line(clause, node, True)]


def explain(clause: Clause, node: Any) -> dict[str, Any]:
    """The whole tree for ``node``: each clause's text and value, each test's reads."""
    entry: dict[str, Any] = {"clause": clause.text, "kind": clause.kind,
                             "value": bool(clause.fn(node))}
    if clause.parts:
        entry["parts"] = [explain(part, node) for part in clause.parts]
    else:
        entry["reads"] = reads(clause, node)
    return entry


CAUSE_READS = 12     # values a trace keeps of what a match's filters read


@functools.lru_cache(maxsize=1024)
def _cause_plan(query: Query) -> tuple[tuple[int, tuple[str, ...]], ...]:
    """(levels up from a match to the object a filter tested, a path it read), at
    most :data:`CAUSE_READS`; empty when the levels cannot be said (``..``)."""
    depth = query.depth
    if depth is None:
        return ()
    plan: list[tuple[int, tuple[str, ...]]] = []
    for part in query.filters:
        if part.depth is None:
            return ()
        try:
            paths = paths_read(part.expression or "", part.values)
        except ExpressionError:
            continue
        plan.extend((depth - part.depth, path) for path in paths)
    return tuple(plan[:CAUSE_READS])


def match_cause(query: Query | None, cursor: Cursor) -> list[str]:
    """What the filters of ``query`` read to match the object at ``cursor``:
    ``state.kvDeployed: absent`` of the object, ``services.0.type: 'linuxApp'``
    of the object above it that a filter tested (a trace's ``cause``)."""
    if query is None:
        return []
    found = []
    for up, path in _cause_plan(query):
        tested = cursor.up(up) if up else cursor
        name = ".".join(path) or "@"
        if up:
            name = f"{tested.path_text()}.{name}"
        found.append(f"{name}: {shown(read(tested.value, path), path)}")
    return found
