"""Queries given as ``<parameter>`` text with calls in it: the values are data.

``<parameter name="match">`` of a rule and ``<parameter name="path">`` of
``select-all``/``select-single`` are evaluated as Murano 0.2 did -- the
text, and the values of the calls inside it -- but never joined into one
string to be parsed: the text is compiled with a marker where each call
stands, and the calls' values are bound to the markers
(:mod:`fornace.conductor.dsl.slots`), so a value is a string, a name or an
index whatever quotes, brackets or operators it holds.

Two shapes keep their 0.2 meaning: a parameter that is only text is that
query, and a parameter that is exactly one call (``<parameter name="match">
<select path="#query"/></parameter>``) is the query that call computes --
the workflow asked for a computed query.  ``<text>`` elements holding only
text are workflow text too.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fornace.common.errors import WorkflowError
from fornace.conductor.dsl.query import Query, compile_query
from fornace.conductor.dsl.scope import Frame
from fornace.conductor.dsl.slots import MARKERS, marker
from fornace.conductor.dsl.xmlload import Node

if TYPE_CHECKING:  # pragma: no cover
    from fornace.conductor.dsl.engine import Evaluator


@dataclass(frozen=True, slots=True)
class QueryText:
    """A parameter's query text with one marker per call, and those calls."""

    text: str
    calls: tuple[Node, ...]
    wrap: bool
    strip_first: bool   # a value at the very start (end) loses its leading
    strip_last: bool    # (trailing) spaces, as 0.2's stripped text did

    def sample(self) -> Query:
        """The query with a placeholder for every value (for checks at load time)."""
        return compile_query(self.text, self.wrap, ("x",) * len(self.calls))


def query_text(param: Node, wrap: bool) -> QueryText | None:
    """The :class:`QueryText` of a parameter mixing text and calls; None for
    plain text or a lone call, which are read as they are."""
    children = param.children
    if not children or (param.blank and len(children) == 1):
        return None
    pieces = [param.text]
    calls: list[Node] = []
    for child, tail in zip(children, param.tails):
        if _is_plain_text(child):
            pieces.append(child.text)
        else:
            pieces.append(marker(len(calls)))
            calls.append(child)
        pieces.append(tail)
    for piece in pieces[::2] + [c.text for c in children if _is_plain_text(c)]:
        found = MARKERS.search(piece)
        if found:
            raise WorkflowError(f"character U+{ord(found.group()):04X} is not allowed in "
                                f"a query", param.file, param.line)
    text = "".join(pieces).strip()
    if not calls:
        return QueryText(text, (), wrap, False, False)
    return QueryText(text, tuple(calls), wrap, text.startswith(marker(0)),
                     text.endswith(marker(len(calls) - 1)))


def _is_plain_text(node: Node) -> bool:
    return node.tag == "text" and not node.children and not node.params


def evaluate(ev: Evaluator, frame: Frame, found: QueryText) -> Query | Any:
    """The query, its values bound; or, when a call gives something that is
    not a string, what 0.2's content would have been (the caller refuses it)."""
    values: list[str] = []
    others: list[Any] = []
    for call in found.calls:
        value = ev.call(call, frame)
        if isinstance(value, str):
            values.append(value)
        else:
            others.append(value)
    if others:
        return others[0] if len(others) == 1 else others
    if found.strip_first:
        values[0] = values[0].lstrip()
    if found.strip_last:
        values[-1] = values[-1].rstrip()
    return compile_query(found.text, found.wrap, tuple(values))
