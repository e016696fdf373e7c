"""Limits on data: oversized literals, values, models and nesting are clean errors.

Every violation is an error naming the file and line (at load time) or an
error report naming the rule and the place (at run time) -- never a Python
exception, never unbounded memory.
"""
from __future__ import annotations

import json

import pytest

from fornace.common.errors import ExpressionError, WorkflowError
from fornace.conductor.dsl.limits import Limits
from fornace.conductor.dsl.query import compile_query
from fornace.conductor.workflowfiles import load_workflow, load_workflows

SMALL = Limits(max_model_bytes=20_000, max_value_bytes=2_000, max_json_depth=12)

# an object without an id is never muted: a rule matching it fires on every pass
EVERY_PASS = "$.services[0].osImage"


def model() -> dict:
    return {"id": "E", "services": [{"id": "S", "osImage": {"name": "img"}, "units": []}]}


def stopped(run, *needles: str) -> str:
    assert run.status == "error", run.reports
    [error] = run.errors
    assert error.startswith("Deployment stopped: ")
    for needle in needles:
        assert needle in error, error
    json.dumps(run.model)   # whatever happened, the model can still be sent back
    return error


# ------------------------------------------------------------ integer literals

@pytest.mark.parametrize("digits", [101, 5000])
def test_long_integer_in_a_filter_is_a_located_error(catalog, digits):
    path = catalog.rules(f'<rule match="$.services[?(@.port == {"9" * digits})]">\n'
                         '<report text="x"/></rule>')
    with pytest.raises(ExpressionError,
                       match=f"number of {digits} characters \\(at most 100\\)") as caught:
        load_workflow(path)
    assert caught.value.file == str(path) and caught.value.line == 2
    assert f"number of {digits} characters (at most 100)" in str(caught.value)


def test_a_hundred_digits_are_still_a_number(catalog):
    catalog.rules(f'<rule match="$[?(@.big == {"9" * 100})]"><set path="hit"><true/></set>'
                  '</rule>')
    run = catalog.run({"id": "E", "big": int("9" * 100)})
    assert run.model.get("hit") is True


@pytest.mark.parametrize("query", ["$.services[%s]" % ("9" * 5000), "$[%s]" % ("9" * 5000),
                                   "$.a[1:%s]" % ("9" * 5000), "$.a.%s" % ("9" * 5000)])
def test_long_index_is_an_expression_error(query):
    with pytest.raises(ExpressionError, match="more than 100 digits"):
        compile_query(query)


def test_a_huge_int_element_is_an_error_report(catalog):
    path = catalog.rules(f'<rule match="$">\n<set path="n"><int>{"9" * 5000}</int></set></rule>')
    run = catalog.run({"id": "E"})
    assert run.status == "error"
    [error] = run.errors
    assert f"{path}:3: <int>: '99999" in error and len(error) < 500
    assert "is not an integer (of at most 4300 digits)" in error


def test_every_bad_file_is_named_when_loading_a_folder(catalog):
    catalog.rules(f'<rule match="$[?(@.a == {"1" * 5000})]"/>', "a.xml")
    catalog.rules('<rule match="$">\n<bad-tag/></rule>', "b.xml")
    with pytest.raises(WorkflowError, match="^2 problems in the workflow files of ") as caught:
        load_workflows(catalog.workflows)
    text = str(caught.value)
    assert text.startswith("2 problems in the workflow files of ")
    assert "a.xml:2: " in text and "b.xml:3: unknown function <bad-tag>" in text


# ------------------------------------------------------------ values and the model

def test_a_string_doubling_every_pass_is_stopped_by_max_value_bytes(catalog):
    catalog.rules(f'<rule id="grow" match="{EVERY_PASS}">\n'
                  '<set path="name"><select path="name"/><select path="name"/></set></rule>')
    run = catalog.run(model(), limits=SMALL)
    error = stopped(run, "main.xml:3: <set> of rule 'grow'",
                    "larger than 2000 bytes as JSON ([engine] max_value_bytes)",
                    "services.0.osImage.name")
    assert "Deployment stopped: " in error
    assert len(run.model["services"][0]["osImage"]["name"]) <= 2000


def test_a_list_sharing_its_parts_is_measured_as_json_not_as_memory(catalog):
    # [x, x] at every pass: memory grows by one list, the JSON text doubles
    catalog.rules(f'<rule id="dag" match="{EVERY_PASS}">\n'
                  '<set path="tree"><list><item><select path="tree"/></item>'
                  '<item><select path="tree"/></item></list></set></rule>')
    run = catalog.run(model(), limits=Limits(max_value_bytes=10_000, max_json_depth=100))
    stopped(run, "rule 'dag'", "max_value_bytes")
    assert len(json.dumps(run.model)) < 30_000


@pytest.mark.parametrize("rule, needles", [
    ('<rule id="nest" match="$">\n<set path="copy"><list><item><select path="/"/></item></list>'
     '</set></rule>', ("main.xml:3: <set> of rule 'nest'", "the model would contain itself",
                      "to copy")),
    ('<rule id="loop" match="$.services[0]">\n<set path="#me"><select/></set>\n'
     '<set target="me" path="inner.again"><select/></set></rule>',
     ("main.xml:4: <set> of rule 'loop' would write a value holding the object it goes "
      "into at $ (the model would contain itself) to #me.inner.again",)),
])
def test_the_model_written_into_itself_is_refused(catalog, rule, needles):
    catalog.rules(rule)
    run = catalog.run(model())
    stopped(run, *needles)
    assert "copy" not in run.model and "inner" not in run.model["services"][0]


def test_small_writes_adding_up_are_stopped_by_max_model_bytes(catalog):
    # a new key of 500 characters on every pass: each value fits, the model does not
    catalog.rules(f'<rule id="pile" match="{EVERY_PASS}">\n'
                  f'<set>{"x" * 500}<parameter name="path">/pile.<generate-hostname '
                  'pattern="k#"/></parameter></set></rule>')
    run = catalog.run(model(), limits=SMALL)
    stopped(run, "the model grew larger than 20000 bytes as JSON ([engine] max_model_bytes)",
            "rules that wrote the most: pile at ")
    assert len(json.dumps(run.model)) < 20_000 + 20_000 // 16 + 2_000


def test_nesting_deeper_every_pass_is_stopped_by_max_json_depth(catalog):
    catalog.rules('<rule id="walk" match="$..next"><rule id="end" match="$[?(@.end)]">\n'
                  '<set path="end"><false/></set>\n<set path="next"><map><item name="end">'
                  '<true/></item></map></set></rule></rule>')
    run = catalog.run({"id": "E", "next": {"end": True}}, limits=SMALL)
    stopped(run, "main.xml:4: <set> of rule 'walk.end'",
            "would nest the model deeper than 12 levels ([engine] max_json_depth)")


def test_a_model_over_the_limits_from_the_start_is_an_error_report(catalog):
    catalog.rules('<rule match="$"><set path="x">1</set></rule>')
    run = catalog.run({"id": "E", "blob": "x" * 30_000}, limits=SMALL)
    stopped(run, "the model given is larger than 20000 bytes as JSON")
    deep: dict = {"id": "E"}
    inner = deep
    for _ in range(20):
        inner["a"] = {}
        inner = inner["a"]
    run = catalog.run(deep, limits=SMALL)
    stopped(run, "the model given is nested deeper than 12 levels", "$.a.a.a")


def test_ordinary_writes_within_the_limits_go_on(catalog):
    catalog.rules('<rule id="r" match="$.services[*]"><set path="state.note">'
                  f'{"n" * 1900}</set><set path="state.obj"><map><item name="a">1</item>'
                  '</map></set></rule>')
    run = catalog.run(model(), limits=SMALL)
    assert run.status == "success", run.reports
    assert run.model["services"][0]["state"]["obj"] == {"a": "1"}


def test_nesting_through_a_variable_is_found_after_the_pass(catalog):
    # where a variable's object sits in the model is not known when it is written:
    # the model is measured once the pass is over
    catalog.rules('<rule id="walk" match="$..next"><rule id="end" match="$[?(@.end)]">\n'
                  '<set path="#here"><select/></set><set path="end"><false/></set>\n'
                  '<set target="here" path="next"><map><item name="end"><true/></item></map>'
                  '</set></rule></rule>')
    run = catalog.run({"id": "E", "next": {"end": True}}, limits=SMALL)
    stopped(run, "the model is nested deeper than 12 levels ([engine] max_json_depth) at $.next",
            "rules that wrote the most: walk.end at ")
