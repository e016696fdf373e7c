"""Model values inside a query are data: they never change what a filter means.

Murano 0.2 workflow files build matches from text and ``<select>`` values
(``@.domain == '<select path="domain"/>'``).  Whatever a value holds --
quotes, parentheses, ``and``/``or``, ``&&``, ``||``, ``==``, ``]`` -- the
filter compares with that exact string.
"""
from __future__ import annotations

import pytest

from fornace.conductor.workflowcheck import check

HOSTILE = [
    "x') or (@.type == 'activeDirectory",
    "a' or True or 'b",
    'a" or True or "b',
    "acme.loc')].units[*]",
    "it's (\"q\") && || == != ] [ ) (",
    "' or @.type == 'activeDirectory' or '",
    "\\' or True or \\'",
    "\ue000",
]

DIRECTORY = ('<rule id="dc"><parameter name="match">/$.services[?(@.type == \'activeDirectory\' '
             'and @.domain == \'<select path="domain"/>\')]</parameter>'
             '<set path="/found"><select path="id"/></set></rule>')


def domain_model(web_domain: str, ad_domain: str = "acme.loc") -> dict:
    return {"id": "E", "services": [
        {"id": "AD", "type": "activeDirectory", "domain": ad_domain, "units": []},
        {"id": "W", "type": "web", "domain": web_domain, "units": [{"id": "u1"}]}]}


@pytest.mark.parametrize("value", HOSTILE)
def test_a_value_in_a_quoted_filter_string_is_only_compared(catalog, value):
    catalog.rules(f'<rule id="web" match="$.services[?(@.type == \'web\')]">{DIRECTORY}</rule>')
    run = catalog.run(domain_model(value))
    assert run.status == "success", run.reports
    assert "found" not in run.model          # 0.2 matched the directory for some of these
    run = catalog.run(domain_model(value, ad_domain=value))
    assert run.status == "success", run.reports
    assert run.model["found"] == "AD"        # and the same value is found where it is


def select_all(catalog, model: dict, path: str) -> list:
    """What a ``select-all`` whose path parameter is ``path`` finds at the root."""
    catalog.rules('<rule id="s" match="$"><set path="found"><select-all><parameter name="path">'
                  f'{path}</parameter></select-all></set></rule>')
    run = catalog.run(model)
    assert run.status == "success", run.reports
    return run.model["found"]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_value_in_a_select_all_path_is_only_compared(catalog, value):
    assert select_all(catalog, domain_model(value), "$.services[?(@.domain == "
                      "'<select path=\"services.1.domain\"/>')].id") == ["W"]


@pytest.mark.parametrize("value, expected", [
    ("8080", ["W"]),                 # a number standing alone is that number (0.2)
    (" 8080 ", ["W"]),
    ("8080 or True", []),            # anything else is one string: no operator
    ("@.port", []),
    ("None", ["AD"]),                # as is None (the directory has no port)
])
def test_a_value_standing_alone_is_one_operand(catalog, value, expected):
    model = domain_model("d")
    model["services"][1]["port"] = 8080
    model["wanted"] = value
    assert select_all(catalog, model,
                      '$.services[?(@.port == <select path="wanted"/>)].id') == expected


@pytest.mark.parametrize("field, expected", [
    ("units", [[{"id": "u1"}]]),
    ("units[*]", []),                # a name, not a path: no such key
    ("*", []),
    ("..id", []),
])
def test_a_value_in_a_name_is_that_name(catalog, field, expected):
    model = domain_model("d")
    model["field"] = field
    assert select_all(catalog, model,
                      "$.services[?(@.type == 'web')].<select path=\"field\"/>") == expected


def test_a_value_in_an_at_path_is_a_key(catalog):
    path = "$.services[?(@.<select path=\"key\"/> == 'd')].id"
    model = domain_model("d")
    model["key"] = "domain"
    assert select_all(catalog, model, path) == ["W"]
    model["key"] = "domain == 'acme.loc' or @.type"
    assert select_all(catalog, model, path) == []


def test_a_match_that_is_one_call_is_the_query_it_computes(catalog):
    # explicitly computed by the workflow: read as a query, as in 0.2
    catalog.rules('<set path="#q">$.services[?(@.type == \'web\')]</set>\n'
                  '<rule id="r"><parameter name="match"><select path="#q"/></parameter>'
                  '<set path="hit"><true/></set></rule>')
    run = catalog.run(domain_model("d"))
    assert run.status == "success", run.reports
    assert run.hits("r") == ["W"]


def test_a_broken_query_template_is_reported_with_the_values_in_place(catalog):
    path = catalog.rules('<rule id="r" match="$.services[?(@.type == \'web\')]">\n'
                         '<rule id="bad"><parameter name="match">/$.services[?(@.domain == '
                         '\'<select path="domain"/>\' and)]</parameter></rule></rule>')
    run = catalog.run(domain_model("a(b)c"))
    assert run.status == "error"
    [error] = run.errors
    assert f"{path}:3: " in error
    # the column counts the value as it is: 'a(b)c' is 5 characters
    assert "bad filter [?(@.domain == 'a(b)c' and)]: expected a value, found end of " \
           "expression at column 24" in error
    assert check([path]) == [f"{path}:3: bad filter [?(@.domain == 'x' and)]: expected a value, "
                             f"found end of expression at column 20 in expression "
                             "\"/$.services[?(@.domain == 'x' and)]\""]


def test_values_cannot_stand_where_only_syntax_can(catalog):
    path = catalog.rules('<rule id="r" match="$">\n<set path="x"><select-all>'
                         '<parameter name="path">$.services[<select path="a"/>:2].id</parameter>'
                         '</select-all></set></rule>')
    model = domain_model("d")
    model["a"] = "1"
    run = catalog.run(model)
    assert run.status == "error"
    assert "a value can only stand for a name, an index or a quoted key" in run.errors[0]
    [problem] = check([path])
    assert problem.startswith(f"{path}:3: a value can only stand")


def test_workflow_text_may_not_hold_marker_characters(catalog):
    path = catalog.rules('<rule id="r">\n<parameter name="match">$.a[?(@.b == \'\ue000\' or '
                         '<select path="x"/>)]</parameter></rule>')
    [problem] = check([path])
    assert problem == f"{path}:3: character U+E000 is not allowed in a query"
