"""Regular expressions that catalogs and workflow packages give, run by RE2.

A type's schema may say ``"pattern": "..."`` (``types.json``); the pattern
comes from whoever uploaded the package, so it is never handed to Python's
``re``: a backtracking engine takes exponential time on patterns such as
``^(a+)+$`` and holds the interpreter meanwhile.  :func:`compile_pattern`
compiles it with RE2 (the ``google-re2`` package), whose matching takes time
linear in the text -- times the size of the compiled program, which is
bounded here too -- and is the only way such patterns are used:

* RE2 refuses what needs backtracking (backreferences, look-around) and
  Python-only syntax such as ``\\Z`` (RE2 spells it ``\\z``): a
  :class:`PatternError` saying why, reported when the catalog is read or the
  package uploaded;
* a pattern longer than :data:`MAX_PATTERN_CHARS`, or whose program is larger
  than :data:`MAX_PROGRAM_SIZE` instructions (``(.*){1000}``) or needs more
  than :data:`MAX_MEM` bytes, is refused the same way;
* :meth:`Pattern.search` is JSON Schema's ``pattern``: an unanchored search
  (``^``/``$`` anchor at the ends of the text only, ``$`` not before a
  final newline), and it tells only whether it matches (no captures: RE2
  can then use its DFA);
* one match costs about ``program size × characters``
  (:meth:`Pattern.cost`); a text longer than :meth:`Pattern.max_chars` is
  not matched at all, so that no single match holds the interpreter for
  more than a few milliseconds.

Compiled patterns are kept in a bounded LRU cache.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import re2

from fornace.common.errors import FornaceError

MAX_PATTERN_CHARS = 1000
#: RE2 instructions of one compiled pattern (``^[a-z]+$`` is about 5).
MAX_PROGRAM_SIZE = 2000
#: RE2's memory for one pattern (its program and DFA cache).
MAX_MEM = 2 * 1024 * 1024
#: The most one match may cost: program size × characters (a few ms at worst:
#: a nullable repetition such as ``(?:a?){600}a{600}`` runs at some 25 ns a unit).
MAX_MATCH_COST = 250_000
CACHED = 512


class PatternError(FornaceError):
    """A pattern RE2 cannot or will not run; the message says why."""


@dataclass(frozen=True)
class Pattern:
    """A compiled pattern and what matching it costs."""

    text: str
    size: int          # instructions of its RE2 program (forward or reverse, the larger)
    _regexp: Any

    @property
    def max_chars(self) -> int:
        """The longest text it is matched against (:data:`MAX_MATCH_COST` / size)."""
        return MAX_MATCH_COST // self.size

    def cost(self, text: str) -> int:
        """About the work of matching ``text``: program size × characters."""
        return self.size * (len(text) + 1)

    def search(self, text: str) -> bool:
        """Whether the pattern matches somewhere in ``text`` (JSON Schema's
        ``pattern``); :class:`PatternError` when ``text`` is longer than
        :attr:`max_chars`."""
        if len(text) > self.max_chars:
            raise PatternError(f"a text of {len(text)} characters is too long to match "
                               f"against the pattern {self.text!r} (at most "
                               f"{self.max_chars} characters)")
        return self._regexp.search(text) is not None


def _options() -> Any:
    options = re2.Options()
    options.max_mem = MAX_MEM
    options.longest_match = False     # leftmost-first, as JSON Schema's engines
    options.never_capture = True      # a yes or no: the DFA suffices
    options.log_errors = False        # the error goes to the caller, not stderr
    return options


@functools.lru_cache(maxsize=CACHED)
def compile_pattern(text: str) -> Pattern:
    """``text`` compiled by RE2 (remembered); :class:`PatternError` when it is not
    a string, is too long or too large, or RE2 refuses it."""
    if not isinstance(text, str):
        raise PatternError(f"a pattern must be a string, not {type(text).__name__}")
    if len(text) > MAX_PATTERN_CHARS:
        raise PatternError(f"the pattern is {len(text)} characters long (at most "
                           f"{MAX_PATTERN_CHARS})")
    try:
        regexp = re2.compile(text, _options())
    except re2.error as exc:
        raise PatternError(f"invalid pattern {text!r}: {_reason(exc)}") from None
    size = max(regexp.programsize, regexp.reverseprogramsize, 1)
    if size > MAX_PROGRAM_SIZE:
        raise PatternError(f"the pattern {text!r} is too large: {size} instructions once "
                           f"compiled (at most {MAX_PROGRAM_SIZE}; large counted "
                           f"repetitions such as {{1000}} make it so)")
    return Pattern(text, size, regexp)


def check_pattern(text: Any) -> None:
    """:class:`PatternError` unless :func:`compile_pattern` takes ``text``."""
    compile_pattern(text)


def _reason(exc: Exception) -> str:
    reason = exc.args[0] if exc.args else str(exc)
    if isinstance(reason, bytes):
        reason = reason.decode("utf-8", "replace")
    reason = str(reason)
    if "invalid perl operator" in reason or "invalid escape sequence" in reason:
        reason += (" (RE2 syntax: no backreferences or look-around; \\z, not \\Z, "
                   "for the end of the text)")
    elif "pattern too large" in reason:
        reason += f" (more than {MAX_MEM} bytes of memory)"
    return reason
