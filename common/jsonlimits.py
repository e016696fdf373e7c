"""JSON under limits: reading it, and measuring values that will become JSON.

Operators and peers hand Fornace JSON (templates, ``--model`` files, task
models, agent results).  Python's own reader fails on some of it with
exceptions that are no error messages: ``json.loads`` raises
``RecursionError`` on input nested a few thousand levels deep and a bare
``ValueError`` on an integer of more than 4300 digits.  :func:`loads` is the
one JSON reader for such input: it refuses JSON nested deeper than a limit
before parsing it (a scan of its brackets, strings skipped) and turns every
limit into a :class:`JsonLimitError` saying what and where (line, column and
JSON path).

:func:`measure` is the other half: the size a value would have as JSON and
its nesting depth, walked iteratively and never further than the limits --
a value that shares its parts (``[x, x]`` repeated) has a JSON text that
doubles at each step while its memory does not, and walking it whole would
take as long as printing it.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Collection, Iterator, Sequence

from fornace.common.errors import LocatedError

#: The deepest nesting any reader accepts, whatever the configuration says:
#: the recursive code that handles models (copies, masking, merging) stays far
#: from Python's recursion limit below it.
HARD_MAX_DEPTH = 200
DEFAULT_MAX_DEPTH = 100
#: Python refuses to convert longer integers (``sys.get_int_max_str_digits``).
INT_MAX_DIGITS = 4300

# a string (escapes included; an unterminated one runs to the end) or a bracket; with
# the separators too for finding the path of a place
_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.S)
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{},:]', re.S)
_OPENERS = frozenset("[{")
# for _shallow: an escape; every ASCII character but quotes and brackets (deleted);
# a string once escapes are gone; a container holding no other
_ESCAPE = re.compile(r"\\.", re.S)
_KEEP_STRUCTURE = {code: None for code in range(128) if chr(code) not in '"[]{}'}
_STRING_PLAIN = re.compile(r'"[^"]*"')
_INNERMOST = re.compile(r"\[\]|\{\}")
_QUICK_PASSES = 16
_SPACE = re.compile(r"\s*")
_LONG_INTEGER = re.compile(r'"(?:[^"\\]|\\.)*"?|-?\d{%d,}(?![\d.eE])' % (INT_MAX_DIGITS + 1),
                           re.S)
_FIND_STEPS = 100_000   # containers visited to name the place of a problem
_PATH_SHOWN = 8   # path steps shown before "…" in messages


class JsonLimitError(LocatedError):
    """JSON (or a value bound to become JSON) over one of the limits.

    ``kind`` is ``size``, ``depth``, ``cycle`` or ``digits``; ``path`` the
    JSON path of the place when it is known (``$.services[0].x``).
    """

    def __init__(self, message: str, kind: str, path: str | None = None,
                 file: str | None = None, line: int | None = None) -> None:
        super().__init__(message, file, line)
        self.kind = kind
        self.path = path


# ------------------------------------------------------------------ reading

def loads(text: str, *, max_depth: int = DEFAULT_MAX_DEPTH, source: str | None = None) -> Any:
    """``json.loads(text)`` that never nests deeper than ``max_depth`` containers.

    ``source`` (a file name, "--model"…) goes into :class:`JsonLimitError`
    messages.  Syntax errors are left to the caller: ``json.JSONDecodeError``.
    """
    max_depth = min(max_depth, HARD_MAX_DEPTH)
    if text.count("[") + text.count("{") > max_depth and not _shallow(text, max_depth):
        _check_depth(text, max_depth, source)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:   # not expected after the scan; never a traceback
        raise JsonLimitError(f"JSON nested too deeply (more than {max_depth} levels)",
                             "depth", file=source) from None
    except ValueError as exc:   # an integer Python will not convert
        raise _digits_error(text, source) from exc


def read_bounded(path: str | Path, max_bytes: int, what: str = "file") -> bytes:
    """A file's bytes, refused (before reading) when it is larger than ``max_bytes``.

    ``OSError`` is left to the caller, who knows how to word it.
    """
    path = Path(path)
    with path.open("rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise JsonLimitError(f"{what} is larger than {max_bytes} bytes", "size", file=str(path))
    return data


def _shallow(text: str, max_depth: int) -> bool:
    """Whether ``text`` surely nests no deeper than ``max_depth`` (False: it
    may; :func:`_check_depth` then finds out where).  A few whole-text passes
    of C code instead of a Python step per string and bracket: escapes out,
    then everything but quotes and brackets, then the strings, which leaves
    the brackets alone; each pass then removes the containers that hold no
    other, so containers gone after a few passes nest no deeper than that.
    A megabyte result costs a few milliseconds; deeper texts, and texts
    this cannot read (an unterminated string), are left to the exact scan."""
    rest = _STRING_PLAIN.sub("", _ESCAPE.sub("", text).translate(_KEEP_STRUCTURE))
    for _ in range(min(max_depth, _QUICK_PASSES)):
        rest, removed = _INNERMOST.subn("", rest)
        if not removed:
            break
    return not rest


def _check_depth(text: str, max_depth: int, source: str | None) -> None:
    depth = 0
    for match in _BRACKETS.finditer(text):
        char = match.group()
        if char in _OPENERS:
            depth += 1
            if depth > max_depth:
                raise _depth_error(text, match.start(), max_depth, source)
        elif char == "]" or char == "}":
            depth -= 1


def _depth_error(text: str, position: int, max_depth: int,
                 source: str | None) -> JsonLimitError:
    line, column = _line_column(text, position)
    path = _path_at(text, position)
    where = f"line {line}, column {column}" if source is None else f"column {column}"
    return JsonLimitError(f"JSON nested deeper than {max_depth} levels at {where} ({path})",
                          "depth", path, source, line if source is not None else None)


def _digits_error(text: str, source: str | None) -> JsonLimitError:
    for match in _LONG_INTEGER.finditer(text):
        if not match.group().startswith('"'):
            line, column = _line_column(text, match.start())
            digits = len(match.group().lstrip("-"))
            where = f"line {line}, column {column}" if source is None else f"column {column}"
            return JsonLimitError(
                f"integer of {digits} digits at {where} ({_path_at(text, match.start())}); "
                f"at most {INT_MAX_DIGITS} digits", "digits", _path_at(text, match.start()),
                source, line if source is not None else None)
    return JsonLimitError(f"integer of more than {INT_MAX_DIGITS} digits", "digits",
                          file=source)


def _line_column(text: str, position: int) -> tuple[int, int]:
    line = text.count("\n", 0, position) + 1
    return line, position - (text.rfind("\n", 0, position) + 1) + 1


def _path_at(text: str, position: int) -> str:
    """The JSON path of the value starting at ``position`` (read from the text before it)."""
    path: list[Any] = []
    for path, _begins in _scan(text, position):
        pass
    return format_path(path)


def line_of(text: str, steps: Sequence[Any]) -> int | None:
    """The line of ``text`` (a JSON document) where the value at the path ``steps``
    (``["types", "x", "schema"]``; list indices as ints) starts -- for an object
    member, the line of its key; None when the text has no such value.  The
    inverse of the paths :class:`JsonLimitError` names, for messages that point
    at a place in a file."""
    target = list(steps)
    if not target:
        return 1 if text.strip() else None
    for path, begins in _scan(text, len(text)):
        if begins is not None and path == target:
            return _line_column(text, begins)[0]
    return None


def _scan(text: str, end: int) -> Iterator[tuple[list[Any], int | None]]:
    """The path of the open containers at each token of ``text`` before ``end`` (a
    key for an object, an index for a list), and where a member or an item
    begins when the token starts one (its key, or its value in a list)."""
    path: list[Any] = []
    kinds: list[str] = []
    last: tuple[str, int] | None = None   # the last string and where it started
    for match in _TOKENS.finditer(text, 0, end):
        token, begins = match.group(), None
        if token in _OPENERS:
            kinds.append(token)
            path.append(0 if token == "[" else None)
            if token == "[":
                begins = _skip_space(text, match.end())
        elif token in "]}":
            if kinds:
                kinds.pop()
                path.pop()
        elif token == ",":
            if kinds and kinds[-1] == "[":
                path[-1] += 1
                begins = _skip_space(text, match.end())
            last = None
        elif token == ":":
            if kinds and kinds[-1] == "{" and last is not None:
                path[-1] = last[0]
                begins = last[1]
        else:
            last = (_string_value(token), match.start())
        yield path, begins


def _skip_space(text: str, position: int) -> int:
    return _SPACE.match(text, position).end()


def _string_value(token: str) -> str:
    try:
        return json.loads(token)
    except ValueError:
        return token.strip('"')


def format_path(steps: list[Any]) -> str:
    """``['services', 0, 'name']`` as ``$.services[0].name`` (long paths cut short)."""
    shown = steps if len(steps) <= _PATH_SHOWN * 2 else steps[:_PATH_SHOWN]
    text = "$" + "".join(f"[{step}]" if isinstance(step, int) else
                         f".{step}" if isinstance(step, str) and step.isidentifier() else
                         f"[{json.dumps(step)}]" for step in shown)
    if len(shown) < len(steps):
        text += f"… ({len(steps)} levels)"
    return text


# ---------------------------------------------------------------- measuring

_SCALAR_SIZES = {type(None): 4, bool: 5, int: 8, float: 8}


def measure(value: Any, *, max_bytes: int, max_depth: int,
            forbidden: Collection[int] = ()) -> int:
    """About the size of ``value`` as JSON (strings counted by characters).

    Raises :class:`JsonLimitError` as soon as the walk passes ``max_bytes``
    (``size``), finds a container nested deeper than ``max_depth`` (``depth``;
    a scalar is depth 0, ``[]`` depth 1) or meets a container whose ``id`` is
    in ``forbidden`` (``cycle``: the value holds the place it is written to).
    The walk is iterative and stops at the first limit, so it costs at most
    about ``max_bytes / 2`` steps whatever the value.
    """
    kind = type(value)
    if kind is str:
        size = len(value) + 2
        if size > max_bytes:
            raise _size_error(max_bytes)
        return size
    if kind is not dict and kind is not list:
        return _SCALAR_SIZES.get(kind, 8)
    total = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append
    scalar_sizes = _SCALAR_SIZES
    while stack:
        item, depth = pop()
        if depth > max_depth:
            raise _place_error(value, item, "depth", max_depth)
        if forbidden and id(item) in forbidden:
            raise _place_error(value, item, "cycle", max_depth)
        below = depth + 1
        if type(item) is dict:
            total += 2 + 4 * len(item) + _keys_size(item)
            children: Any = item.values()
        else:
            total += 2 + 2 * len(item)
            children = item
        for child in children:
            kind = type(child)
            if kind is str:
                total += len(child) + 2
            elif kind is dict or kind is list:
                push((child, below))
            else:
                total += scalar_sizes.get(kind, 8)
        if total > max_bytes:
            raise _size_error(max_bytes)
    return total


def _keys_size(item: dict) -> int:
    try:
        return sum(map(len, item))
    except TypeError:   # a key that is not a string (never in JSON)
        return sum(len(key) if type(key) is str else 8 for key in item)


def _size_error(max_bytes: int) -> JsonLimitError:
    return JsonLimitError(f"larger than {max_bytes} bytes as JSON", "size")


def _place_error(root: Any, target: Any, kind: str, max_depth: int) -> JsonLimitError:
    steps = _find(root, target, max_depth + 1)
    path = None if steps is None else format_path(steps)
    at = "" if path is None else f" (at {path})"
    if kind == "cycle":
        return JsonLimitError(f"contains the place it is written to{at}", "cycle", path)
    return JsonLimitError(f"nested deeper than {max_depth} levels{at}", "depth", path)


def _find(root: Any, target: Any, max_depth: int) -> list[Any] | None:
    """Keys from ``root`` to the container ``target`` (depth-first, bounded in
    depth and in steps: shared parts can make the tree far larger than memory)."""
    stack: list[tuple[Any, list[Any]]] = [(root, [])]
    for _ in range(_FIND_STEPS):
        if not stack:
            break
        item, steps = stack.pop()
        if item is target:
            return steps
        if len(steps) >= max_depth:
            continue
        pairs = item.items() if type(item) is dict else enumerate(item) \
            if type(item) is list else ()
        for key, child in reversed(list(pairs)):
            if type(child) is dict or type(child) is list:
                stack.append((child, steps + [key]))
    return None
