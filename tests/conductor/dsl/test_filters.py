"""Tests of fornace.conductor.dsl.filters: the safe compiler of JSONPath [?( ... )] filters."""
from __future__ import annotations

import pytest

from fornace.common.errors import ExpressionError
from fornace.conductor.dsl.filters import compile_filter


def run(expression, node):
    return compile_filter(expression)(node)


def passes(expression, node):
    return bool(run(expression, node))


# ------------------------------------------------------------ comparisons

NODE = {"n": 5, "f": 1.5, "s": "abc", "t": True, "z": None, "neg": -2,
        "l": [1, 2, "x"], "d": {"k": 1}}


@pytest.mark.parametrize("expression, expected", [
    ("@.n == 5", True), ("@.n == 6", False),
    ("@.n != 6", True), ("@.n != 5", False),
    ("@.n < 6", True), ("@.n < 5", False),
    ("@.n <= 5", True), ("@.n <= 4", False),
    ("@.n > 4", True), ("@.n > 5", False),
    ("@.n >= 5", True), ("@.n >= 6", False),
    ("6 > @.n", True), ("5 > @.n", False),
    ("4 <= @.n", True), ("6 <= @.n", False),
    ("5 == @.n", True), ("'abc' != @.s", False),
    ("@.f == 1.5", True), ("@.f > 1.25", True), ("@.f < 1.0", False),
    ("@.neg == -2", True), ("@.neg < -1.5", True), ("@.neg > - 1", False),
    ("@.s == 'abc'", True), ("@.s == \"abc\"", True), ("@.s < 'abd'", True),
    ("@.s > 'abd'", False),
    ("@.t == True", True), ("@.t == False", False),
    ("@.z == None", True), ("@.missing == None", True), ("@.n == None", False),
    ("@.n == @.n", True), ("@.n < @.f", False), ("@.f < @.n", True),
    ("@.l == @.l", True), ("@.d != @.d", False),
    ("1 == 1", True), ("1 < 0", False),
    ("(@.n > 1) == True", True),
])
def test_comparison(expression, expected):
    assert passes(expression, NODE) is expected


@pytest.mark.parametrize("expression", [
    "@.z < 1", "@.z > 1", "@.z <= 1", "@.z >= 1", "1 < @.z", "1 >= @.z",
    "@.s < 1", "@.s >= 1", "@.n > 'a'", "@.l < 1", "@.d > @.n",
    "@.missing < 5", "@.missing >= @.n", "@.s < @.n", "@.n >= @.s",
])
def test_ordering_between_incompatible_types_is_false(expression):
    assert run(expression, NODE) is False


def test_ordering_of_two_literals_of_incompatible_types_is_false():
    assert run("'a' < 1", {}) is False


# ------------------------------------------------------------ boolean logic

@pytest.mark.parametrize("expression, expected", [
    ("@.a or @.b", "A"),
    ("@.zero or @.b", "B"),
    ("@.zero or @.empty", ""),
    ("@.a and @.b", "B"),
    ("@.zero and @.b", 0),
    ("@.a and @.empty", ""),
    ("@.zero or @.empty or @.a or @.b", "A"),
    ("@.a and @.b and @.zero and @.a", 0),
    ("@.a and @.b and @.c", "C"),
    ("@.zero or @.missing", None),
    ("@.missing and @.a", None),
    ("@.a or 7", "A"),
    ("0 or 'x'", "x"),
    ("1 and 'x'", "x"),
])
def test_and_or_return_python_values(expression, expected):
    assert run(expression, {"a": "A", "b": "B", "c": "C", "zero": 0, "empty": ""}) == expected


@pytest.mark.parametrize("expression, expected", [
    ("not @.a", False), ("not @.zero", True), ("not @.missing", True),
    ("not not @.a", True), ("not not not @.a", False), ("not @.empty", True),
    ("not 0", True), ("not 'x'", False),
])
def test_not_returns_bool(expression, expected):
    assert run(expression, {"a": "A", "zero": 0, "empty": ""}) is expected


@pytest.mark.parametrize("expression, node, expected", [
    # not binds tighter than and
    ("not @.a and @.b", {"a": 0, "b": 1}, True),
    ("not @.a and @.b", {"a": 0, "b": 0}, False),
    ("not @.a and @.b", {"a": 1, "b": 1}, False),
    ("not (@.a and @.b)", {"a": 1, "b": 0}, True),
    # and binds tighter than or
    ("@.a or @.b and @.c", {"a": 1, "b": 0, "c": 0}, True),
    ("@.a or @.b and @.c", {"a": 0, "b": 1, "c": 0}, False),
    ("(@.a or @.b) and @.c", {"a": 1, "b": 0, "c": 0}, False),
    ("@.a and @.b or @.c", {"a": 0, "b": 0, "c": 1}, True),
    ("@.a and (@.b or @.c)", {"a": 0, "b": 0, "c": 1}, False),
    # comparisons bind tighter than not
    ("not @.a == 1", {"a": 1}, False),
    ("not @.a == 1", {"a": 2}, True),
    ("not @.a in (1, 2)", {"a": 1}, False),
    ("not @.a or @.b", {"a": 1, "b": 1}, True),
    ("not (@.a or @.b)", {"a": 0, "b": 1}, False),
    ("((@.a))", {"a": 3}, True),
    ("(not @.a) == True", {"a": 0}, True),
])
def test_precedence(expression, node, expected):
    assert passes(expression, node) is expected


def test_or_and_and_return_values_with_precedence():
    assert run("@.a or @.b and @.c", {"a": 0, "b": "B", "c": "C"}) == "C"
    assert run("@.a and @.b or @.c", {"a": 0, "b": "B", "c": "C"}) == "C"


def test_long_or_chain_does_not_nest_deeply():
    expression = " or ".join(f"@.k{i}" for i in range(2000))
    assert run(expression, {"k1999": "last"}) == "last"
    assert run(expression, {}) is None


# ------------------------------------------------------------------- paths

@pytest.mark.parametrize("expression, node", [
    ("@.state.hostname", {}),
    ("@.state.hostname", {"state": None}),
    ("@.state.hostname", {"state": {}}),
    ("@.state.hostname", {"state": "text"}),
    ("@.state.hostname", {"state": [1, 2]}),
    ("@.state.hostname", None),
    ("@.state.hostname", []),
    ("@.state.hostname", "string"),
    ("@.state.hostname", 42),
    ("@.a", None),
    ("@.a", ["x"]),
    ("@.0", {"a": 1}),
    ("@.units.5.name", {"units": [{"name": "x"}]}),
    ("@.units.0.name", {"units": [{}]}),
    ("@.units.0.name", {"units": "abc"}),
    ("@.units.x", {"units": [1]}),
    ("@.a.b.c.d.e", {"a": {"b": {"c": None}}}),
])
def test_missing_path_is_none(expression, node):
    assert run(expression, node) is None


@pytest.mark.parametrize("expression, node, expected", [
    ("@", {"a": 1}, {"a": 1}),
    ("@", 0, 0),
    ("@.a", {"a": 1}, 1),
    ("@.a.b", {"a": {"b": [1]}}, [1]),
    ("@.a.b.c", {"a": {"b": {"c": "deep"}}}, "deep"),
    ("@.units.0.name", {"units": [{"name": "first"}, {"name": "second"}]}, "first"),
    ("@.units.1.name", {"units": [{"name": "first"}, {"name": "second"}]}, "second"),
    ("@.0", ["zero", "one"], "zero"),
    ("@.1.0", [[], ["x"]], "x"),
    ("@.0", {"0": "key"}, "key"),
    ("@.m.0", {"m": {"0": "str key"}}, "str key"),
    ("@._private", {"_private": 1}, 1),
    ("@.a_b9", {"a_b9": 2}, 2),
    ("@.True", {"True": 3}, 3),
    ("@.in", {"in": 4}, 4),
])
def test_path_lookup(expression, node, expected):
    assert run(expression, node) == expected


@pytest.mark.parametrize("expression, node, expected", [
    ("not @.temp.x", {}, True),
    ("not @.temp.x", {"temp": None}, True),
    ("not @.temp.x", {"temp": {"x": "set"}}, False),
    ("@.state.hostname is None", {}, True),
    ("@.state.hostname is None", {"state": None}, True),
])
def test_missing_paths_in_expressions(expression, node, expected):
    assert run(expression, node) is expected


# -------------------------------------------------------------- membership

@pytest.mark.parametrize("expression, node, expected", [
    ("@.t in ('a', 'b')", {"t": "a"}, True),
    ("@.t in ('a', 'b')", {"t": "c"}, False),
    ("@.t in ('a', 'b',)", {"t": "b"}, True),
    ("@.t in ('a',)", {"t": "a"}, True),
    ("@.t in ('a',)", {"t": "b"}, False),
    ("@.t in ['a', 'b']", {"t": "b"}, True),
    ("@.t in ['a']", {"t": "c"}, False),
    ("@.t in []", {"t": "c"}, False),
    ("@.t in ()", {"t": "c"}, False),
    ("@.t in (1, 2.5, None, True)", {"t": 2.5}, True),
    ("@.t in (1, 2.5, None, True)", {}, True),
    ("@.t in (1, -2)", {"t": -2}, True),
    ("@.t in (1, 2)", {"t": [1]}, False),
    ("@.t in (1, 2)", {"t": {"a": 1}}, False),
    ("@.t in (@.a, 'x')", {"t": 3, "a": 3}, True),
    ("@.t in (@.a, 'x')", {"t": "x"}, True),
    ("@.t in (@.a, 'x')", {"t": [1], "a": [1]}, True),
    ("@.t in (@.a, 'x')", {"t": 4, "a": 3}, False),
    ("@.t not in ('a', 'b')", {"t": "c"}, True),
    ("@.t not in ('a', 'b')", {"t": "a"}, False),
    ("@.t not in ['a']", {"t": "a"}, False),
    ("@.t not in ('a',)", {}, True),
    # a string on the right is a substring test, as in Python
    ("@.t in 'abc'", {"t": "bc"}, True),
    ("@.t in 'abc'", {"t": "ac"}, False),
    ("@.t in ('abc')", {"t": "b"}, True),
    ("@.t in ('abc')", {"t": "abc"}, True),
    ("@.t in ('abc')", {"t": "x"}, False),
    ("@.t in 'abc'", {"t": None}, False),
    ("@.t in 'abc'", {"t": 1}, False),
    ("'b' in 'abc'", {}, True),
    ("@.t not in 'abc'", {"t": "x"}, True),
    # an @ path on the right
    ("@.t in @.list", {"t": 2, "list": [1, 2]}, True),
    ("@.t in @.list", {"t": 3, "list": [1, 2]}, False),
    ("@.t in @.list", {"t": [1], "list": [[1]]}, True),
    ("@.t in @.map", {"t": "k", "map": {"k": 1}}, True),
    ("@.t in @.map", {"t": "v", "map": {"k": "v"}}, False),
    ("@.t in @.map", {"t": [1], "map": {"k": "v"}}, False),
    ("@.t in @.str", {"t": "ell", "str": "hello"}, True),
    ("@.t in @.str", {"t": 1, "str": "hello"}, False),
    ("@.t in @.missing", {"t": 1}, False),
    ("@.t in @.none", {"t": None, "none": None}, False),
    ("@.t in @.num", {"t": 1, "num": 1}, False),
    ("@.t in @.flag", {"t": True, "flag": True}, False),
    ("@.t not in @.missing", {"t": 1}, True),
    ("@.t not in @.list", {"t": 3, "list": [1, 2]}, True),
    ("'x' in @", {"x": 1}, True),
    ("'x' in @", ["x"], True),
    ("'x' in @", None, False),
    ("@.t in (@.list)", {"t": 1, "list": [1]}, True),
])
def test_membership(expression, node, expected):
    assert run(expression, node) is expected


# --------------------------------------------------------------------- is

@pytest.mark.parametrize("expression, node, expected", [
    ("@.a is None", {}, True),
    ("@.a is None", {"a": None}, True),
    ("@.a is None", {"a": 0}, False),
    ("@.a is None", {"a": ""}, False),
    ("@.a is not None", {"a": 0}, True),
    ("@.a is not None", {"a": False}, True),
    ("@.a is not None", {}, False),
    ("@.a.b is not None", {"a": None}, False),
    ("not @.a is None", {"a": 1}, True),
    ("@ is None", None, True),
])
def test_is_none(expression, node, expected):
    assert run(expression, node) is expected


# ---------------------------------------------------------------- literals

@pytest.mark.parametrize("expression, expected", [
    (r"'it\'s'", "it's"),
    (r'"say \"hi\""', 'say "hi"'),
    (r"'back\\slash'", "back\\slash"),
    (r"'line\nbreak'", "line\nbreak"),
    (r"'tab\there'", "tab\there"),
    (r"'\\n'", "\\n"),
    ("'double \" inside single'", 'double " inside single'),
    ('"single \' inside double"', "single ' inside double"),
    ("''", ""),
    ("'with ) and ( and , inside'", "with ) and ( and , inside"),
    ("'unicode é'", "unicode é"),
    ("42", 42),
    ("-42", -42),
    ("- 1", -1),
    ("1.5", 1.5),
    ("-1.5", -1.5),
    ("1e3", 1000.0),
    ("2.5E-1", 0.25),
    ("0", 0),
    ("True", True),
    ("False", False),
    ("None", None),
])
def test_literals(expression, expected):
    value = run(expression, {})
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize("expression, node, expected", [
    (r"@.name == 'O\'Brien'", {"name": "O'Brien"}, True),
    (r'@.path == "C:\\temp"', {"path": "C:\\temp"}, True),
    (r"@.text == 'a\tb\nc'", {"text": "a\tb\nc"}, True),
    (r"@.text == 'a\\tb'", {"text": "a\tb"}, False),
])
def test_string_escapes_in_comparisons(expression, node, expected):
    assert passes(expression, node) is expected


@pytest.mark.parametrize("expression", [
    "@.a==1", "  @.a  ==  1  ", "\t@.a\n==\n1", "(@.a)==(1)", "@.a in(1,2)", "@.a in[1]",
])
def test_whitespace_is_free_between_tokens(expression):
    assert passes(expression, {"a": 1})


# ---------------------------------------------------------- real examples

UNITS = [
    {"id": "273c9183b6e74c9c9db7fdd532c5eb25", "type": "activeDirectory",
     "osImage": {"name": "ws-2012"}, "state": {"hostname": "dc01"}, "temp": {},
     "isMaster": True, "domain": "acme.loc"},
    {"id": "a1", "type": "webServer", "osImage": {"name": None},
     "state": {"hostname": "web01", "joined": True},
     "temp": {"instanceName": "web01-i"}, "domain": "acme.loc"},
    {"id": "b2", "type": "msSqlClusterServer", "osImage": {"name": "ws-2012"},
     "state": {}, "domain": "other.loc"},
    {"id": "c3", "type": "webServer", "osImage": None, "domain": None},
]


@pytest.mark.parametrize("expression, expected_ids", [
    ("@.type in ('activeDirectory', 'webServer') and @.osImage.name",
     ["273c9183b6e74c9c9db7fdd532c5eb25"]),
    ("not @.state.hostname", ["b2", "c3"]),
    ("@.state.hostname and not @.temp.instanceName", ["273c9183b6e74c9c9db7fdd532c5eb25"]),
    ("@.isMaster", ["273c9183b6e74c9c9db7fdd532c5eb25"]),
    ("@.type == 'msSqlClusterServer' and @.domain", ["b2"]),
    ("@.domain == 'acme.loc' and not @.state.joined", ["273c9183b6e74c9c9db7fdd532c5eb25"]),
    ('@.id == "273c9183b6e74c9c9db7fdd532c5eb25"', ["273c9183b6e74c9c9db7fdd532c5eb25"]),
    ("@.id != \"273c9183b6e74c9c9db7fdd532c5eb25\"", ["a1", "b2", "c3"]),
    ("@.domain is None", ["c3"]),
    ("@.type not in ('webServer',) and @.domain is not None",
     ["273c9183b6e74c9c9db7fdd532c5eb25", "b2"]),
])
def test_murano_examples(expression, expected_ids):
    predicate = compile_filter(expression)
    assert [unit["id"] for unit in UNITS if predicate(unit)] == expected_ids


# ----------------------------------------------------------------- caching

def test_compile_is_cached():
    assert compile_filter("@.a == 'cached'") is compile_filter("@.a == 'cached'")
    assert compile_filter("@.a == 'cached'") is not compile_filter("@.a == 'other'")


def test_predicate_is_reusable():
    predicate = compile_filter("@.a > 1")
    assert [predicate({"a": value}) for value in (0, 2, None, "x", 3)] == \
        [False, True, False, False, True]


def test_non_string_expression_is_a_type_error():
    with pytest.raises(TypeError, match="filter expression must be a string, not NoneType"):
        compile_filter(None)


# ----------------------------------------------------------------- rejects

REJECTED = [
    # function calls
    ("len(@.x)", "function calls are not allowed at column 4"),
    ("@.a()", "function calls are not allowed at column 4"),
    ("@.a.lower()", "function calls are not allowed at column 10"),
    ("'a'.upper()", "attribute access"),
    ("True()", "function calls are not allowed"),
    ("(@.a)(1)", "function calls are not allowed at column 6"),
    ("@.a == str(1)", "function calls are not allowed at column 11"),
    ("@()", "function calls are not allowed at column 2"),
    # attribute access that is not an @ path
    ("'a'.upper", "attribute access is only allowed on @ paths at column 4"),
    ("(@.a).b", "attribute access is only allowed on @ paths at column 6"),
    ("1 .real", "attribute access"),
    ("None.x", "attribute access"),
    ("@.a .b", "spaces are not allowed inside an @ path at column 5"),
    ("@ .a", "spaces are not allowed inside an @ path"),
    # subscripts
    ("@.a[0]", "subscripts are not allowed at column 4"),
    ("@['a']", "subscripts are not allowed at column 2"),
    ("@[0]", "subscripts are not allowed"),
    ("'abc'[0]", "subscripts are not allowed"),
    ("@.a in (1, 2)[0]", "subscripts are not allowed"),
    ("@.a[1:2]", "subscripts are not allowed"),
    # lambdas and other keywords
    ("lambda: 1", "lambda is not allowed at column 1"),
    ("lambda x: x", "lambda is not allowed"),
    ("@.a == lambda: 1", "lambda is not allowed at column 8"),
    ("@.a if @.b else 1", "keyword 'if' is not allowed at column 5"),
    ("[x for x in @]", "lists are only allowed on the right side of 'in'"),
    ("@.a in [x for x in @.b]", "unknown name 'x'"),
    ("yield 1", "keyword 'yield' is not allowed"),
    ("import os", "keyword 'import' is not allowed"),
    ("await @.a", "keyword 'await' is not allowed"),
    # unknown identifiers and dunders
    ("x", "unknown name 'x' "),
    ("os", "unknown name 'os'"),
    ("os.system('ls')", "unknown name 'os'"),
    ("@.a == x", "unknown name 'x'"),
    ("true", "unknown name 'true'"),
    ("null", "unknown name 'null'"),
    ("__import__", "dunder name '__import__' is not allowed at column 1"),
    ("__import__('os').system('id')", "dunder name '__import__'"),
    ("__builtins__", "dunder name"),
    ("a__b", "dunder name"),
    ("@.__class__", "dunder path segment '__class__' is not allowed at column 3"),
    ("@.a.__class__.__bases__", "dunder path segment '__class__' is not allowed at column 5"),
    ("@.__dict__", "dunder path segment"),
    ("@.a__b", "dunder path segment"),
    ("@.__", "dunder path segment"),
    ("@.a in @.__globals__", "dunder path segment"),
    # arithmetic and bitwise operators
    ("@.a + 1", "arithmetic operator '+' is not allowed at column 5"),
    ("@.a - 1", "arithmetic operator '-' is not allowed at column 5"),
    ("@.a-1", "arithmetic operator '-' is not allowed at column 4"),
    ("@.a * 2", "arithmetic operator '*' is not allowed"),
    ("@.a / 2", "arithmetic operator '/' is not allowed"),
    ("@.a // 2", "arithmetic operator '//' is not allowed"),
    ("@.a % 2", "arithmetic operator '%' is not allowed"),
    ("@.a ** 2", "arithmetic operator '**' is not allowed"),
    ("+1", "arithmetic operator '+' is not allowed at column 1"),
    ("@.a == 1 + 1", "arithmetic operator '+' is not allowed at column 10"),
    ("'a' * 1000000000", "arithmetic operator '*'"),
    ("-@.a", "'-' is only allowed directly before a number at column 1"),
    ("--1", "'-' is only allowed directly before a number"),
    ("-True", "'-' is only allowed directly before a number"),
    ("-'a'", "'-' is only allowed directly before a number"),
    ("@.a & 1", "bitwise operator '&' is not allowed"),
    ("@.a | 1", "bitwise operator '|' is not allowed"),
    ("@.a ^ 1", "bitwise operator '^' is not allowed"),
    ("~@.a", "bitwise operator '~' is not allowed at column 1"),
    ("@.a << 1", "bitwise operator '<<' is not allowed"),
    ("@.a >> 1", "bitwise operator '>>' is not allowed"),
    # assignment and walrus
    ("@.a = 1", "assignment '=' is not allowed"),
    ("@.a=1", "assignment '=' is not allowed (use '==' to compare) at column 4"),
    ("(@.a := 1)", "assignment expression ':=' is not allowed at column 6"),
    ("(x := 1)", "unknown name 'x'"),
    ("@.a += 1", "arithmetic operator '+'"),
    # empty and unbalanced
    ("", "empty expression"),
    ("   ", "empty expression"),
    ("()", "expected a value, found ')' at column 2"),
    ("(", "expected a value, found end of expression at column 2"),
    ("(@.a", "unclosed '(' at column 1"),
    ("((@.a == 1)", "unclosed '(' at column 1"),
    ("@.a in ('a', 'b'", "unclosed '(' at column 8"),
    ("@.a in ['a'", "unclosed '[' at column 8"),
    ("@.a in ['a')", "expected ',' or ']', found ')' at column 12"),
    ("@.a)", "unmatched ')' at column 4"),
    ("(@.a))", "unmatched ')' at column 6"),
    ("@.a == 1)", "unmatched ')'"),
    ("]", "expected a value, found ']'"),
    (")", "expected a value, found ')' at column 1"),
    # strings
    ("'abc", "unterminated string at column 1"),
    ('@.a == "abc', "unterminated string at column 8"),
    ("@.a == 'abc\"", "unterminated string"),
    ("'abc\\", "unterminated string at column 1"),
    ("'\\x41'", "unsupported escape '\\x' at column 2"),
    ("'\\u0041'", "unsupported escape '\\u'"),
    ("'\\0'", "unsupported escape"),
    ("f'x'", "string prefix 'f' is not allowed at column 1"),
    ("b'x'", "string prefix 'b' is not allowed"),
    ("r'x'", "string prefix 'r' is not allowed"),
    ("Rb\"x\"", "string prefix 'Rb' is not allowed"),
    # trailing garbage and missing parts
    ("@.a @.b", "expected an operator or the end of the expression, found '@.b' at column 5"),
    ("@.a == 1 2", "found '2' at column 10"),
    ("@.a 'x'", "found \"'x'\""),
    ("@.a not @.b", "found 'not' at column 5"),
    ("@.a and", "expected a value, found end of expression at column 8"),
    ("@.a or or @.b", "expected a value, found 'or' at column 8"),
    ("and @.a", "expected a value, found 'and' at column 1"),
    ("not", "expected a value, found end of expression"),
    ("@.a ==", "expected a value, found end of expression at column 7"),
    ("== 1", "expected a value, found '=='"),
    ("@.a == not @.b", "expected a value, found 'not' at column 8"),
    ("@.a in", "expected a value, found end of expression"),
    ("@.a is", "only None is allowed after 'is' at column 7"),
    ("@.a is not", "only None is allowed after 'is'"),
    ("@.a ; 1", "found ';' at column 5"),
    ("@.a $ 1", "found '$'"),
    ("@.a ? 1", "found '?'"),
    ("@.a # comment", "found '#'"),
    ("@.a : 1", "found ':'"),
    ("{'a': 1}", "expected a value, found '{'"),
    ("`x`", "expected a value, found '`'"),
    ("@.a ! @.b", "'!' is not allowed (use 'not' or '!=') at column 5"),
    ("!@.a", "'!' is not allowed"),
    ("@.a && @.b", "bitwise operator '&'"),
    ("@.a || @.b", "bitwise operator '|'"),
    ("@.a, @.b", "found ','"),
    ("@.a === 1", "assignment '=' is not allowed (use '==' to compare) at column 7"),
    ("@.a <> 1", "expected a value, found '>'"),
    ("@.a é", "unexpected character 'é' at column 5"),
    ("@.a\x00", "unexpected character"),
    # chained comparisons and is/in misuse
    ("@.a < @.b < 1", "chained comparisons are not allowed (use 'and') at column 11"),
    ("1 < @.a <= 3", "chained comparisons are not allowed"),
    ("@.a == @.b == @.c", "chained comparisons are not allowed"),
    ("@.a in @.b in @.c", "chained comparisons are not allowed"),
    ("@.a in @.b not in @.c", "chained comparisons are not allowed"),
    ("@.a == 1 is None", "chained comparisons are not allowed"),
    ("@.a is None is None", "chained comparisons are not allowed"),
    ("@.a is 1", "only None is allowed after 'is' at column 8"),
    ("@.a is True", "only None is allowed after 'is'"),
    ("@.a is @.b", "only None is allowed after 'is'"),
    ("@.a is not 'x'", "only None is allowed after 'is' at column 12"),
    ("@.a in 5", "the right side of 'in' must be a tuple, a list, a string or an @ path"),
    ("@.a in None", "the right side of 'in' must be"),
    ("@.a in (1)", "the right side of 'in' must be"),
    ("@.a not in True", "the right side of 'in' must be"),
    ("@.a in (1,,)", "expected a value, found ','"),
    ("@.a in (,)", "expected a value, found ','"),
    ("@.a in (1 2)", "expected an operator or ')', found '2'"),
    # tuples and lists outside `in`
    ("@.a == (1, 2)", "tuples are only allowed on the right side of 'in' at column 8"),
    ("(1, 2)", "tuples are only allowed on the right side of 'in'"),
    ("(1,)", "tuples are only allowed on the right side of 'in'"),
    ("@.a == [1]", "lists are only allowed on the right side of 'in' at column 8"),
    ("[1] == @.a", "lists are only allowed on the right side of 'in'"),
    # bad paths and numbers
    ("@.", "expected a path segment after '.' at column 2"),
    ("@..a", "expected a path segment after '.' at column 2"),
    ("@.a.", "expected a path segment after '.' at column 4"),
    ("@.a.b.", "expected a path segment after '.' at column 6"),
    ("@.1a", "invalid path segment '1a' at column 3"),
    ("@.a.0x", "invalid path segment '0x'"),
    ("@a", "expected '.' after '@' at column 2"),
    ("@_a", "expected '.' after '@'"),
    ("@@", "found '@'"),
    ("$.a", "expected a value, found '$'"),
    ("1a", "invalid number '1a' at column 1"),
    ("0x10", "invalid number '0x10'"),
    ("1_000", "invalid number '1_000'"),
    ("1e", "invalid number '1e'"),
    (".5", "expected a value, found '.'"),
    ("1.", "attribute access"),
    # nesting limits
    ("(" * 100 + "1" + ")" * 100, "expression is nested too deeply"),
    ("not " * 100 + "@.a", "expression is nested too deeply"),
]


@pytest.mark.parametrize("expression, message", REJECTED)
def test_rejected(expression, message):
    with pytest.raises(ExpressionError) as caught:
        compile_filter(expression)
    text = str(caught.value)
    assert message in text
    assert "at column " in text
    assert text.endswith(f" in expression {expression!r}")
    assert caught.value.expression == expression


def test_rejection_is_an_expression_error_with_location_support():
    with pytest.raises(ExpressionError,
                       match="function calls are not allowed at column 4") as caught:
        compile_filter("len(@.x)")
    error = caught.value.located("workflows/ad.xml", 12)
    assert str(error) == ("workflows/ad.xml:12: function calls are not allowed at column 4 "
                          "in expression 'len(@.x)'")


def test_rejections_are_not_cached_as_predicates():
    for _ in range(2):
        with pytest.raises(ExpressionError,
                           match=r"arithmetic operator '\+' is not allowed at column 5"):
            compile_filter("@.a +")


# ------------------------------------------------- no Python evaluation used

def test_module_does_not_use_python_evaluation():
    """Inspect (not run) our own source: no eval/exec/compile/ast in the compiler."""
    import ast
    import fornace.conductor.dsl.filters as module
    with open(module.__file__, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in {"eval", "exec", "compile", "__import__"}, node.func.id
        if isinstance(node, ast.Import):
            assert all(alias.name != "ast" for alias in node.names)
        if isinstance(node, ast.ImportFrom):
            assert node.module != "ast"
        if isinstance(node, ast.Attribute):
            assert node.attr != "literal_eval"


def test_nested_depth_within_limit_is_accepted():
    assert run("(" * 30 + "@.a" + ")" * 30, {"a": 1}) == 1
    assert run("not " * 30 + "@.a", {"a": 1}) is True
