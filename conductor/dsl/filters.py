"""Safe compiler for the filter expressions of JSONPath ``[?( ... )]`` brackets.

Murano 0.2 workflow files select objects with filters such as::

    $.services[*].units[?(@.state.hostname and not @.temp.instanceName)]

The text between ``[?(`` and ``)]`` looks like Python, and the JSONPath library
of the original engine evaluated it with Python's ``eval``.  Workflow files are edited by operators, so that
would let anyone who can edit a workflow run arbitrary code in the conductor
(``__import__('os').system(...)``).  We therefore never use ``eval``,
``exec``, ``compile`` or the ``ast`` module on it.  Instead a small tokenizer
and a recursive-descent parser accept a tiny, explicitly listed subset of
Python and turn it straight into nested closures:

* ``or`` / ``and`` / ``not`` (Python precedence and return values), ``( )``;
* ``== != < <= > >=`` (ordering between incompatible types is False);
* ``in`` / ``not in`` a tuple or list of values, a string or an ``@`` path;
* ``is None`` / ``is not None``;
* operands: ``@``, ``@.a.b.0.c`` paths (a missing step gives None),
  string, integer and float literals (optionally negative, at most
  :data:`MAX_NUMBER_LENGTH` characters), True, False, None.

Values bound to markers (:mod:`fornace.conductor.dsl.slots`) are data: inside
a string literal they are part of the string, in an ``@`` path part of a
key, and standing alone they are one operand -- the number, True, False or
None they spell exactly, else the string itself.

Everything else -- calls, attribute access, subscripts, arithmetic, lambdas,
assignment, unknown names, dunder names -- is rejected with an
:class:`~fornace.common.errors.ExpressionError` naming the problem and its column.

All dispatch on the kind of syntax happens once, at compile time; a compiled
predicate is just a few closure calls per object and allocates nothing (the
one exception: ``in`` over a tuple that itself contains ``@`` paths).
"""
from __future__ import annotations

import functools
import keyword
import operator
import re
import string
from typing import Any, Callable, NamedTuple

from fornace.common.errors import ExpressionError
from fornace.conductor.dsl.slots import Slots

__all__ = ["compile_filter", "MAX_NUMBER_LENGTH"]

Getter = Callable[[Any], Any]

_MAX_DEPTH = 64
#: The longest number literal (characters): Python itself refuses to read
#: integers of more than 4300 digits, and no filter needs more than a few.
MAX_NUMBER_LENGTH = 100

_TOKEN_RE = re.compile(r"""
    (?P<ws>\s+)
  | (?P<path>@(?:\.[A-Za-z0-9_\ue000-\uf8ff]*)*)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<num>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?[A-Za-z0-9_]*)
  | (?P<str>['"])
  | (?P<slot>[\ue000-\uf8ff])
  | (?P<op>==|!=|<=|>=|:=|\*\*|//|<<|>>|[-<>()\[\],+*/%=.~&|^!:;{}`$?\\#])
""", re.VERBOSE)

_NAME_CHARS = frozenset(string.ascii_letters + string.digits + "_")
_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_NUMBER_RE = re.compile(r"[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")
_SIGNED_NUMBER_RE = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t"}
_CONSTANTS = {"True": True, "False": False, "None": None}
_WORDS = frozenset({"and", "or", "not", "in", "is"})
_STRING_PREFIXES = frozenset({"r", "b", "u", "f", "rb", "br", "fr", "rf"})

_COMPARISONS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt,
                "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_MIRRORED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_FORBIDDEN_OPS = {
    "=": "assignment '=' is not allowed (use '==' to compare)",
    ":=": "assignment expression ':=' is not allowed",
    "!": "'!' is not allowed (use 'not' or '!=')",
    **{op: f"arithmetic operator {op!r} is not allowed"
       for op in ("+", "-", "*", "/", "%", "**", "//")},
    **{op: f"bitwise operator {op!r} is not allowed"
       for op in ("&", "|", "^", "~", "<<", ">>")},
}


class _Token(NamedTuple):
    kind: str       # path, name, num, str, op, bad, end
    text: str       # source text (or the error message for "bad")
    value: Any      # segments, number, string value
    col: int        # 1-based column


class _Operand(NamedTuple):
    """A compiled sub-expression: its closure and, if constant, its value."""
    fn: Getter
    const: bool = False
    value: Any = None


def _constant(value: Any) -> _Operand:
    return _Operand(lambda node: value, True, value)


def _folded(fn: Getter, *children: _Operand) -> _Operand:
    """Evaluate ``fn`` now when every child is constant (it ignores the node)."""
    if all(child.const for child in children):
        return _constant(fn(None))
    return _Operand(fn)


# --------------------------------------------------------------- tokenizer

def _tokenize(expression: str, slots: Slots | None = None) -> list[_Token]:
    """Split ``expression`` into tokens; problems become "bad" tokens.

    Deferring lexical errors to the parser reports the leftmost problem first.
    ``slots``: the values bound to the markers of ``expression``.
    """
    tokens: list[_Token] = []
    pos, length = 0, len(expression)
    while pos < length:
        match = _TOKEN_RE.match(expression, pos)
        if match is None:
            message = f"unexpected character {expression[pos]!r}"
            tokens.append(_Token("bad", message, None, pos + 1))
            break
        kind, text, col = match.lastgroup, match.group(), pos + 1
        pos = match.end()
        if kind == "ws":
            continue
        if kind == "str":
            token, pos = _lex_string(expression, pos, text, col, slots)
        elif kind == "slot":
            token = _lex_slot(text, col, slots)
        elif kind == "path" and expression[pos:pos + 1] in _NAME_CHARS:
            token = _Token("bad", "expected '.' after '@'", None, pos + 1)
        elif kind == "path":
            token = _lex_path(text, col, slots)
        elif kind == "num":
            token = _lex_number(text, col)
        elif (kind == "name" and text.lower() in _STRING_PREFIXES
              and expression[pos:pos + 1] in ("'", '"')):
            token = _Token("bad", f"string prefix {text!r} is not allowed", None, col)
        else:
            token = _Token(kind, text, None, col)
        tokens.append(token)
        if token.kind == "bad":
            break
    tokens.append(_Token("end", "end of expression", None, length + 1))
    return tokens


def _lex_string(expression: str, pos: int, quote: str, col: int,
                slots: Slots | None = None) -> tuple[_Token, int]:
    chars: list[str] = []
    while pos < len(expression):
        char = expression[pos]
        if slots is not None and "\ue000" <= char <= "\uf8ff":
            chars.append(slots.fill(char))   # a bound value: data, as it is
            pos += 1
            continue
        if char == quote:
            text = expression[col - 1:pos + 1]
            return _Token("str", text, "".join(chars), col), pos + 1
        if char == "\\":
            escaped = expression[pos + 1:pos + 2]
            if escaped not in _ESCAPES:
                if not escaped:
                    break
                message = f"unsupported escape '\\{escaped}'"
                return _Token("bad", message, None, pos + 1), len(expression)
            chars.append(_ESCAPES[escaped])
            pos += 2
        else:
            chars.append(char)
            pos += 1
    return _Token("bad", "unterminated string", None, col), pos


def _lex_path(text: str, col: int, slots: Slots | None = None) -> _Token:
    segments = text.split(".")[1:]
    keys = []
    offset = col + 1
    for segment in segments:
        if not segment:
            return _Token("bad", "expected a path segment after '.'", None, offset)
        if "__" in segment:
            message = f"dunder path segment {segment!r} is not allowed"
            return _Token("bad", message, None, offset + 1)
        if slots is not None and slots.holds(segment):
            keys.append(slots.render(segment))   # a key made of values: data
        elif not (segment.isdigit() or _IDENTIFIER_RE.match(segment)):
            return _Token("bad", f"invalid path segment {segment!r}", None, offset + 1)
        else:
            keys.append(segment)
        offset += len(segment) + 1
    return _Token("path", text, tuple(keys), col)


def _lex_number(text: str, col: int) -> _Token:
    if len(text) > MAX_NUMBER_LENGTH:
        return _Token("bad", f"number of {len(text)} characters (at most "
                             f"{MAX_NUMBER_LENGTH})", None, col)
    if not _NUMBER_RE.match(text):
        return _Token("bad", f"invalid number {text!r}", None, col)
    is_float = "." in text or "e" in text or "E" in text
    return _Token("num", text, float(text) if is_float else int(text), col)


def _lex_slot(char: str, col: int, slots: Slots | None) -> _Token:
    value = None if slots is None else slots.value(char)
    if value is None:
        return _Token("bad", f"unexpected character {char!r}", None, col)
    return _Token("slot", value, bound_operand(value), col)


def bound_operand(value: str) -> Any:
    """A value standing alone in a filter: the number, True, False or None it
    spells exactly, else the string itself -- one operand, whatever it holds."""
    text = value.strip()
    if text in _CONSTANTS:
        return _CONSTANTS[text]
    if len(text) <= MAX_NUMBER_LENGTH and _SIGNED_NUMBER_RE.match(text):
        is_float = "." in text or "e" in text or "E" in text
        return float(text) if is_float else int(text)
    return value


# ------------------------------------------------------------ closures

def _path_getter(segments: tuple[str, ...]) -> Getter:
    """Closure walking ``segments`` from a node; any missing step gives None."""
    if not segments:
        return lambda node: node
    if not all(segment.isdigit() for segment in segments):
        if len(segments) == 1:
            key = segments[0]
            return lambda node: node.get(key) if isinstance(node, dict) else None
        if not any(segment.isdigit() for segment in segments):
            return _names_getter(segments)
    return _mixed_getter(tuple((s, int(s) if s.isdigit() else None) for s in segments))


def _names_getter(keys: tuple[str, ...]) -> Getter:
    if len(keys) == 2:                      # the common @.state.hostname, unrolled
        first, second = keys

        def get_two(node: Any) -> Any:
            if isinstance(node, dict):
                node = node.get(first)
                if isinstance(node, dict):
                    return node.get(second)
            return None
        return get_two

    def get(node: Any) -> Any:
        for key in keys:
            if not isinstance(node, dict):
                return None
            node = node.get(key)
        return node
    return get


def _mixed_getter(steps: tuple[tuple[str, int | None], ...]) -> Getter:
    def get(node: Any) -> Any:
        for key, index in steps:
            if isinstance(node, dict):
                node = node.get(key)
            elif index is not None and isinstance(node, (list, tuple)):
                node = node[index] if index < len(node) else None
            else:
                return None
        return node
    return get


def _any_of(operands: list[_Operand]) -> _Operand:
    """``a or b or ...`` -- the first truthy value, else the last one."""
    if len(operands) == 2:
        left, right = operands[0].fn, operands[1].fn
        return _folded(lambda node: left(node) or right(node), *operands)
    head, last = tuple(o.fn for o in operands[:-1]), operands[-1].fn

    def any_of(node: Any) -> Any:
        for fn in head:
            value = fn(node)
            if value:
                return value
        return last(node)
    return _folded(any_of, *operands)


def _all_of(operands: list[_Operand]) -> _Operand:
    """``a and b and ...`` -- the first falsy value, else the last one."""
    if len(operands) == 2:
        left, right = operands[0].fn, operands[1].fn
        return _folded(lambda node: left(node) and right(node), *operands)
    head, last = tuple(o.fn for o in operands[:-1]), operands[-1].fn

    def all_of(node: Any) -> Any:
        for fn in head:
            value = fn(node)
            if not value:
                return value
        return last(node)
    return _folded(all_of, *operands)


def _negation(operand: _Operand) -> _Operand:
    fn = operand.fn
    return _folded(lambda node: not fn(node), operand)


def _comparison(op: str, left: _Operand, right: _Operand) -> _Operand:
    if left.const and not right.const:
        op, left, right = _MIRRORED[op], right, left
    fn, compare = left.fn, _COMPARISONS[op]
    if right.const:
        value = right.value
        if op == "==":
            return _folded(lambda node: fn(node) == value, left)
        if op == "!=":
            return _folded(lambda node: fn(node) != value, left)

        # A literal orders only against its own kind of value: no exceptions.
        kinds = (str,) if isinstance(value, str) else (int, float)
        if not isinstance(value, kinds):                    # None
            return _constant(False)

        def ordered_const(node: Any) -> bool:
            item = fn(node)
            return isinstance(item, kinds) and compare(item, value)
        return _folded(ordered_const, left)
    other = right.fn
    if op in ("==", "!="):
        return _Operand(lambda node: compare(fn(node), other(node)))

    def ordered(node: Any) -> bool:
        try:
            return compare(fn(node), other(node))
        except TypeError:
            return False
    return _Operand(ordered)


def _is_none(left: _Operand, negate: bool) -> _Operand:
    fn = left.fn
    if negate:
        return _folded(lambda node: fn(node) is not None, left)
    return _folded(lambda node: fn(node) is None, left)


def _membership_in_sequence(left: _Operand, items: list[_Operand]) -> _Operand:
    fn = left.fn
    if all(item.const for item in items):
        values = frozenset(item.value for item in items)   # literals are hashable

        def in_values(node: Any) -> bool:
            try:
                return fn(node) in values
            except TypeError:                               # unhashable node value
                return False
        return _folded(in_values, left)
    getters = tuple(item.fn for item in items)
    return _Operand(lambda node: fn(node) in tuple(get(node) for get in getters))


def _membership_in_value(left: _Operand, right: _Operand) -> _Operand:
    fn, container = left.fn, right.fn

    def in_value(node: Any) -> bool:
        value = container(node)
        if not isinstance(value, (list, tuple, dict, str)):
            return False
        try:
            return fn(node) in value
        except TypeError:
            return False
    return _folded(in_value, left, right)


# ---------------------------------------------------------------- parser

class _Parser:
    """Recursive descent over the token list, producing :class:`_Operand`."""

    def __init__(self, expression: str, slots: Slots | None = None) -> None:
        self.expression = expression
        self.slots = slots
        self.tokens = _tokenize(expression, slots)
        self.pos = 0
        self.depth = 0

    # -- helpers
    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def next(self) -> _Token:
        token = self.peek()
        self.pos += 1
        return token

    def at(self, kind: str, text: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token.kind == kind and token.text == text

    def error(self, message: str, col: int) -> ExpressionError:
        slots = self.slots
        if slots is None:
            return ExpressionError(f"{message} at column {col}", self.expression)
        return ExpressionError(f"{message} at column {slots.column(self.expression, col)}",
                               slots.render(self.expression))

    def fail(self, token: _Token, expected: str) -> ExpressionError:
        """The error for an unexpected ``token`` where ``expected`` was due."""
        if token.kind == "bad":
            return self.error(token.text, token.col)
        if token.kind == "op" and token.text in _FORBIDDEN_OPS:
            return self.error(_FORBIDDEN_OPS[token.text], token.col)
        if (token.kind == "name" and token.text not in _WORDS and token.text not in _CONSTANTS
                and (keyword.iskeyword(token.text) or "__" in token.text)):
            return self.name_error(token)
        found = token.text if token.kind == "end" else repr(token.text)
        return self.error(f"expected {expected}, found {found}", token.col)

    def name_error(self, token: _Token) -> ExpressionError:
        name = token.text
        if "__" in name:
            return self.error(f"dunder name {name!r} is not allowed", token.col)
        if self.at("op", "(", 1):
            return self.error("function calls are not allowed", self.peek(1).col)
        if name == "lambda":
            return self.error("lambda is not allowed", token.col)
        if keyword.iskeyword(name):
            return self.error(f"keyword {name!r} is not allowed", token.col)
        return self.error(f"unknown name {name!r} (only @ paths, literals, True, False, "
                          f"None, and, or, not, in, is are allowed)", token.col)

    def nested(self, token: _Token) -> None:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.error("expression is nested too deeply", token.col)

    # -- grammar
    def parse(self) -> _Operand:
        if self.peek().kind == "end":
            raise self.error("empty expression", 1)
        result = self.parse_or()
        token = self.peek()
        if token.kind == "op" and token.text == ")":
            raise self.error("unmatched ')'", token.col)
        if token.kind != "end":
            raise self.fail(token, "an operator or the end of the expression")
        return result

    def parse_or(self) -> _Operand:
        operands = [self.parse_and()]
        while self.at("name", "or"):
            self.next()
            operands.append(self.parse_and())
        return operands[0] if len(operands) == 1 else _any_of(operands)

    def parse_and(self) -> _Operand:
        operands = [self.parse_not()]
        while self.at("name", "and"):
            self.next()
            operands.append(self.parse_not())
        return operands[0] if len(operands) == 1 else _all_of(operands)

    def parse_not(self) -> _Operand:
        if not self.at("name", "not"):
            return self.parse_comparison()
        self.nested(self.next())
        result = _negation(self.parse_not())
        self.depth -= 1
        return result

    def parse_comparison(self) -> _Operand:
        left = self.parse_operand()
        result = self.comparison_tail(left)
        if result is not left and self.comparison_ahead():
            raise self.error("chained comparisons are not allowed (use 'and')", self.peek().col)
        return result

    def comparison_ahead(self) -> bool:
        token = self.peek()
        if token.kind == "op":
            return token.text in _COMPARISONS
        return token.kind == "name" and (token.text in ("in", "is")
                                         or (token.text == "not" and self.at("name", "in", 1)))

    def comparison_tail(self, left: _Operand) -> _Operand:
        token = self.peek()
        if token.kind == "op" and token.text in _COMPARISONS:
            self.next()
            return _comparison(token.text, left, self.parse_operand())
        if token.kind != "name":
            return left
        if token.text == "is":
            self.next()
            negate = self.at("name", "not")
            if negate:
                self.next()
            if not self.at("name", "None"):
                raise self.error("only None is allowed after 'is'", self.peek().col)
            self.next()
            return _is_none(left, negate)
        if token.text == "in":
            self.next()
            return self.membership(left)
        if token.text == "not" and self.at("name", "in", 1):
            self.pos += 2
            return _negation(self.membership(left))
        return left

    def membership(self, left: _Operand) -> _Operand:
        token = self.peek()
        if token.kind == "op" and token.text in ("(", "["):
            items, is_sequence = self.sequence(token)
            if is_sequence:
                return _membership_in_sequence(left, items)
            right = items[0]
        else:
            right = self.parse_operand()
        if right.const and not isinstance(right.value, str):
            raise self.error("the right side of 'in' must be a tuple, a list, a string "
                             "or an @ path", token.col)
        return _membership_in_value(left, right)

    def sequence(self, opening: _Token) -> tuple[list[_Operand], bool]:
        """Parse ``( ... )`` or ``[ ... ]`` after ``in``; says if it is a sequence."""
        self.next()
        self.nested(opening)
        closing = ")" if opening.text == "(" else "]"
        items: list[_Operand] = []
        is_sequence = closing == "]"
        while not self.at("op", closing):
            items.append(self.parse_or())
            if not self.at("op", ","):
                break
            self.next()
            is_sequence = True
        self.expect_closing(opening, closing)
        is_sequence = is_sequence or not items
        self.depth -= 1
        self.reject_postfix(opening)
        return items, is_sequence

    def expect_closing(self, opening: _Token, closing: str) -> None:
        token = self.peek()
        if token.kind == "end":
            raise self.error(f"unclosed {opening.text!r}", opening.col)
        if not self.at("op", closing):
            raise self.fail(token, f"',' or {closing!r}" if closing == "]"
                            else f"an operator or {closing!r}")
        self.next()

    def parse_operand(self) -> _Operand:
        token = self.peek()
        result = self.parse_atom()
        self.reject_postfix(token)
        return result

    def reject_postfix(self, start: _Token) -> None:
        token = self.peek()
        if token.kind != "op":
            return
        if token.text == "(":
            raise self.error("function calls are not allowed", token.col)
        if token.text == "[":
            raise self.error("subscripts are not allowed", token.col)
        if token.text == ".":
            if start.kind == "path":
                raise self.error("spaces are not allowed inside an @ path", token.col)
            raise self.error("attribute access is only allowed on @ paths", token.col)

    def parse_atom(self) -> _Operand:
        token = self.next()
        if token.kind == "path":
            return _Operand(_path_getter(token.value))
        if token.kind in ("num", "str", "slot"):
            return _constant(token.value)
        if token.kind == "name" and token.text in _CONSTANTS:
            return _constant(_CONSTANTS[token.text])
        if token.kind == "name" and token.text not in _WORDS:
            self.pos -= 1
            raise self.name_error(token)
        if token.kind == "op" and token.text == "-":
            return self.negative_number(token)
        if token.kind == "op" and token.text in ("(", "["):
            return self.parenthesized(token)
        raise self.fail(token, "a value")

    def negative_number(self, minus: _Token) -> _Operand:
        token = self.next()
        if token.kind != "num":
            raise self.error("'-' is only allowed directly before a number", minus.col)
        return _constant(-token.value)

    def parenthesized(self, opening: _Token) -> _Operand:
        if opening.text == "[":
            raise self.error("lists are only allowed on the right side of 'in'", opening.col)
        self.nested(opening)
        result = self.parse_or()
        if self.at("op", ","):
            raise self.error("tuples are only allowed on the right side of 'in'", opening.col)
        self.expect_closing(opening, ")")
        self.depth -= 1
        return result


@functools.lru_cache(maxsize=4096)
def compile_filter(expression: str, values: tuple[str, ...] = ()) -> Callable[[Any], Any]:
    """Compile the text between ``[?(`` and ``)]`` into a predicate.

    ``predicate(node)`` returns a value whose truthiness says whether ``node``
    passes the filter; it never raises for any JSON-like node.  Raises
    :class:`ExpressionError` naming the problem and its 1-based column when
    ``expression`` is outside the supported grammar.  ``values`` are bound to
    the markers of ``expression`` (:mod:`fornace.conductor.dsl.slots`) as
    data.  Results are cached.
    """
    if not isinstance(expression, str):
        raise TypeError(f"filter expression must be a string, not {type(expression).__name__}")
    return _Parser(expression, Slots(values) if values else None).parse().fn
