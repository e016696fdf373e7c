"""Values bound into query text as data, never as syntax.

A rule's ``<parameter name="match">`` (and a ``select-all`` path given as a
parameter) is text with calls in it, as in Murano 0.2::

    /$.services[?(@.domain == '<select path="domain"/>')]

0.2 pasted each call's value into the text and parsed the result, so a
domain of ``x' or @.type == 'y`` changed what the filter meant.  Here the
text is compiled with one *marker* character per call (a private-use
character, which workflow text may not hold) and the values are *bound* to
the markers: the tokenizers put a value inside the string literal, the name
or the index it stands in as it is, so it can only ever be that string,
name or index -- whatever quotes, brackets or operators it holds.
"""
from __future__ import annotations

import re

FIRST = 0xE000
LAST = 0xF8FF
MARKERS = re.compile("[\ue000-\uf8ff]")


def marker(index: int) -> str:
    """The marker of the ``index``-th value."""
    if not 0 <= index <= LAST - FIRST:
        raise ValueError(f"too many values in one query ({index + 1})")
    return chr(FIRST + index)


class Slots:
    """The values bound to the markers of one query text."""

    __slots__ = ("values",)

    def __init__(self, values: tuple[str, ...]) -> None:
        self.values = values

    def value(self, char: str) -> str | None:
        """The value bound to ``char``, None if it is no bound marker."""
        index = ord(char) - FIRST
        return self.values[index] if 0 <= index < len(self.values) else None

    def holds(self, text: str) -> bool:
        """Does ``text`` hold a marker with a value?"""
        return any(self.value(m.group()) is not None for m in MARKERS.finditer(text))

    def render(self, text: str) -> str:
        """``text`` with every value in place of its marker (for messages)."""
        return MARKERS.sub(lambda m: self.fill(m.group()), text)

    def fill(self, char: str) -> str:
        found = self.value(char)
        return char if found is None else found

    def column(self, text: str, column: int) -> int:
        """The column in ``render(text)`` of 1-based ``column`` of ``text``."""
        shift = 0
        for match in MARKERS.finditer(text, 0, max(column - 1, 0)):
            found = self.value(match.group())
            if found is not None:
                shift += len(found) - 1
        return column + shift
