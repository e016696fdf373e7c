"""Reading and writing the model: select, select-all, select-single, set."""
from __future__ import annotations

import pytest

from fornace.common.errors import WorkflowError
from enginekit import UNITS, evaluate, sample_model


def unit_capture(catalog, body: str, model=None, rule_id: str = "r"):
    """Run ``body`` on every unit; return the run."""
    catalog.rules(f'<rule id="{rule_id}" match="{UNITS}">{body}</rule>')
    run = catalog.run(model)
    assert run.status == "success", run.reports
    return run


# ------------------------------------------------------------ select

def test_select_relative_to_cursor(catalog):
    run = unit_capture(catalog, '<set path="state.n"><select path="name"/></set>')
    assert run.unit("uA1")["state"]["n"] == "web_instance_1"
    assert run.unit("uB1")["state"]["n"] == "db_instance_1"


def test_select_without_path_is_the_cursor_object(catalog):
    run = unit_capture(catalog, '<set path="#me"><select/></set>'
                                '<set path="state.selfId"><select path="#me.id"/></set>')
    assert run.unit("uA2")["state"]["selfId"] == "uA2"


def test_select_default_on_unit(catalog):
    run = unit_capture(catalog, '<set path="state.master"><select path="isMaster" default="no"/>'
                                '</set>')
    assert run.unit("uA1")["state"]["master"] is True
    assert run.unit("uA2")["state"]["master"] == "no"


def test_select_colon_parents(catalog):
    run = unit_capture(catalog,
                       '<set path="state.firstMate"><select path=":0.id"/></set>'
                       '<set path="state.domain"><select path="::domain"/></set>'
                       '<set path="state.image"><select path="::osImage.name"/></set>'
                       '<set path="state.env"><select path="::::name"/></set>')
    a2 = run.unit("uA2")["state"]
    assert a2["firstMate"] == "uA1"  # ':' is the units list
    assert a2["domain"] == "acme.loc"
    assert a2["image"] == "ws-2012-std"
    assert a2["env"] == "MyDataCenter"  # ':::' = services list, '::::' = model
    assert run.unit("uB1")["state"]["firstMate"] == "uB1"
    assert run.unit("uB1")["state"]["domain"] is None


def test_select_colons_stop_at_the_root(catalog):
    run = unit_capture(catalog, '<set path="state.env"><select path=":::::::::id"/></set>')
    assert run.unit("uA1")["state"]["env"] == "ENV1"


def test_select_colon_is_the_units_list(catalog):
    catalog.rules(f'<rule match="{UNITS}"><set path="#units"><select path=":"/></set>'
                  '<set path="state.count"><text><select path="#units.1.id"/></text></set></rule>')
    run = catalog.run()
    assert run.unit("uA1")["state"]["count"] == "uA2"
    assert run.unit("uB1")["state"]["count"] == "None"


def test_select_root_and_indexes(catalog):
    run = unit_capture(catalog,
                       '<set path="state.root"><select path="/name"/></set>'
                       '<set path="state.idx"><select path="/services.0.units.1.name"/></set>'
                       '<set path="state.same"><select path="::units.0.name"/></set>')
    a2 = run.unit("uA2")["state"]
    assert a2["root"] == "MyDataCenter"
    assert a2["idx"] == "web_instance_2"
    assert a2["same"] == "web_instance_1"
    assert run.unit("uB1")["state"]["same"] == "db_instance_1"


@pytest.mark.parametrize("path", ["missing", "name.deeper", "::units.9.name",
                                  "/services.x", "/services.-9", "::noSuchProperty"])
def test_select_missing_is_none(catalog, path):
    run = unit_capture(catalog, f'<set path="state.v"><select path="{path}"/></set>')
    state = run.unit("uA1")["state"]
    assert "v" in state and state["v"] is None


@pytest.mark.parametrize("stored, expected", [
    (None, "dflt"), ("", "dflt"), (0, "dflt"), (False, "dflt"), ([], "dflt"),
    ("x", "x"), (5, 5), (True, True),
])
def test_select_default_when_falsy(stored, expected):
    model = {"id": "E", "v": stored}
    assert evaluate('<select path="v" default="dflt"/>', model) == expected


def test_select_default_from_parameter():
    value = evaluate('<select path="nope"><parameter name="default"><int>3</int></parameter>'
                     '</select>')
    assert value == 3


def test_select_context_variable_and_drill_down(catalog):
    run = unit_capture(catalog,
                       '<set path="#cfg"><map><item name="a"><list><item>x</item><item>y</item>'
                       '</list></item></map></set>'
                       '<set path="state.v"><select path="#cfg.a.1"/></set>'
                       '<set path="state.w"><select path="#cfg"/></set>')
    state = run.unit("uA1")["state"]
    assert state["v"] == "y"
    assert state["w"] == {"a": ["x", "y"]}


def test_select_unset_variable_is_none():
    assert evaluate('<select path="#nothing.a"/>') is None


def test_select_config_values():
    config = {"plain": "p", "nested": {"deep": {"x": 1}}, "dotted.key": "direct"}
    assert evaluate('<select path="##plain"/>', config=config) == "p"
    assert evaluate('<select path="##nested.deep.x"/>', config=config) == 1
    assert evaluate('<select path="##dotted.key"/>', config=config) == "direct"
    assert evaluate('<select path="##absent"/>', config=config) is None
    assert evaluate('<select path="##absent" default="d"/>', config=config) == "d"


def test_select_config_through_a_deployment(catalog):
    catalog.rules('<rule match="$"><set path="out"><select path="##agent.host"/></set></rule>')
    run = catalog.run({"id": "E"}, config={"agent": {"host": "10.0.0.5"}})
    assert run.model["out"] == "10.0.0.5"


def test_select_source(catalog):
    run = unit_capture(catalog,
                       '<set path="#svc"><select path="::"/></set>'
                       '<set path="state.svcName"><select path="name" source="svc"/></set>'
                       '<set path="state.first"><select path="units.0.id" source="svc"/></set>')
    assert run.unit("uA2")["state"] == {"svcName": "web", "first": "uA1"}
    assert run.unit("uB1")["state"] == {"svcName": "db", "first": "uB1"}


def test_select_source_missing_variable_is_none():
    assert evaluate('<select path="a" source="none"/>') is None


# ------------------------------------------------------------ select-all / select-single

def test_select_all_relative_jsonpath():
    value = evaluate(f'<select-all path="{UNITS}.id"/>', sample_model())
    assert value == ["uA1", "uA2", "uB1"]


def test_select_all_filter():
    value = evaluate("<select-all path=\"$.services[?(@.type == 'webServer')].units[*].name\"/>",
                     sample_model())
    assert value == ["web_instance_1", "web_instance_2"]


def test_select_all_filter_on_missing_attribute():
    value = evaluate('<select-all path="$.services[*].units[?(@.isMaster)].id"/>',
                     sample_model())
    assert value == ["uA1"]
    value = evaluate('<select-all path="$.services[?(@.domain is None)].id"/>', sample_model())
    assert value == ["SvcB"]


def test_select_all_in_tuple_and_not():
    value = evaluate("<select-all path=\"$.services[?(@.type in ('x', 'msSqlServer'))].id\"/>",
                     sample_model())
    assert value == ["SvcB"]
    value = evaluate("<select-all path=\"$.services[?(not @.type == 'webServer')].id\"/>",
                     sample_model())
    assert value == ["SvcB"]


def test_select_all_limit():
    value = evaluate(f'<select-all path="{UNITS}.id" limit="2"/>', sample_model())
    assert value == ["uA1", "uA2"]
    assert evaluate(f'<select-all path="{UNITS}.id" limit="0"/>', sample_model()) \
        == ["uA1", "uA2", "uB1"]


def test_select_all_nothing_is_empty_list():
    assert evaluate('<select-all path="$.nothing[*]"/>', sample_model()) == []


def test_select_all_root_and_parent_prefixes(catalog):
    run = unit_capture(catalog,
                       '<set path="state.all">'
                       "<select-all path=\"/$.services[?(@.type == 'msSqlServer')].units[*].id\"/>"
                       '</set>'
                       '<set path="state.mates"><select-all path="::$.units[*].id"/></set>'
                       '<set path="state.svc"><select-all path="::::$.services[*].id"/></set>'
                       # unlike a rule's match, '$' is the object found, not [it]:
                       # ':::' from a unit is the services list, '$[*]' its items
                       '<set path="state.services"><select-all path=":::$[*].id"/></set>'
                       '<set path="state.units"><select-all path=":$[*].id"/></set>')
    a1 = run.unit("uA1")["state"]
    assert a1["all"] == ["uB1"]
    assert a1["mates"] == ["uA1", "uA2"]
    assert a1["svc"] == ["SvcA", "SvcB"]
    assert a1["services"] == ["SvcA", "SvcB"]
    assert a1["units"] == ["uA1", "uA2"]
    assert run.unit("uB1")["state"]["mates"] == ["uB1"]
    assert run.unit("uB1")["state"]["units"] == ["uB1"]


def test_select_all_from_source(catalog):
    run = unit_capture(catalog,
                       '<set path="#svc"><select path="::"/></set>'
                       '<set path="state.ids">'
                       '<select-all path="$.units[*].id" source="svc"/></set>')
    assert run.unit("uA1")["state"]["ids"] == ["uA1", "uA2"]


def test_select_all_path_from_parameter():
    value = evaluate('<select-all><parameter name="path">$.services[?(@.name == '
                     "'<text>db</text>')].id</parameter></select-all>", sample_model())
    assert value == ["SvcB"]


def test_select_single():
    model = sample_model()
    assert evaluate(f'<select-single path="{UNITS}.name"/>', model) == "web_instance_1"
    assert evaluate('<select-single path="$.services[?(@.type == \'none\')]"/>', model) is None
    unit = evaluate('<select-single path="$.services[1].units[0]"/>', model)
    assert unit is model["services"][1]["units"][0]


def test_select_all_returns_model_references(catalog):
    run = unit_capture(catalog,
                       '<set path="#svcs"><select-all path="/$.services[*]"/></set>'
                       '<set path="0.tagged" target="svcs"><true/></set>')
    assert run.model["services"][0]["tagged"] is True
    assert "tagged" not in run.model["services"][1]


# ------------------------------------------------------------ set

def test_set_creates_nested_dicts(catalog):
    run = unit_capture(catalog, '<set path="state.a.b.c">deep</set>')
    assert run.unit("uA1")["state"] == {"a": {"b": {"c": "deep"}}}


def test_set_replaces_none_on_the_way(catalog):
    model = sample_model()
    model["services"][0]["units"][0]["state"] = None
    run = unit_capture(catalog, '<set path="state.x">1</set>', model)
    assert run.unit("uA1")["state"] == {"x": "1"}


def test_set_list_index_and_root(catalog):
    model = {"id": "E", "items": ["a", "b"]}
    catalog.rules('<rule match="$"><set path="items.1">B</set><set path="/top">t</set></rule>')
    run = catalog.run(model)
    assert run.model["items"] == ["a", "B"] and run.model["top"] == "t"


def test_set_parent_path(catalog):
    run = unit_capture(catalog, '<set path="::state.seen"><select path="id"/></set>')
    # every unit writes its service; the last unit of each service wins
    assert run.model["services"][0]["state"]["seen"] == "uA2"
    assert run.model["services"][1]["state"]["seen"] == "uB1"


def test_set_variable_publishes_to_callers_context(catalog):
    run = unit_capture(catalog,
                       '<set path="state.before"><select path="#v"/></set>'
                       '<set path="#v"><select path="id"/></set>'
                       '<set path="state.after"><select path="#v"/></set>')
    # visible to the following siblings, but not to the next match
    for uid in ("uA1", "uA2", "uB1"):
        assert run.unit(uid)["state"] == {"before": None, "after": uid}


def test_set_variable_in_workflow_body_reaches_later_rules(catalog):
    catalog.rules('<set path="#greeting">hi</set>\n'
                  '<rule match="$"><set path="out"><select path="#greeting"/></set>'
                  '<set path="#local">L</set></rule>\n'
                  '<rule match="$.services[0]"><set path="leak"><select path="#local"/></set>'
                  '</rule>', "a.xml")
    run = catalog.run()
    assert run.status == "success"
    assert run.model["out"] == "hi"
    assert run.model["services"][0]["leak"] is None


def test_set_variable_inside_nested_element_stays_there(catalog):
    run = unit_capture(catalog,
                       '<set path="state.m"><map><item name="k"><set path="#hidden">h</set>x'
                       '</item></map></set><set path="state.h"><select path="#hidden"/></set>')
    assert run.unit("uA1")["state"]["h"] is None


def test_set_variable_inside_variable(catalog):
    run = unit_capture(catalog,
                       '<set path="#v"><map/></set><set path="#v.a.b">1</set>'
                       '<set path="state.v"><select path="#v"/></set>')
    assert run.unit("uA1")["state"]["v"] == {"a": {"b": "1"}}


def test_set_target_edits_the_model_through_a_reference(catalog):
    run = unit_capture(catalog,
                       '<set path="#svc"><select path="::"/></set>'
                       '<set path="state.lastUnit" target="svc"><select path="id"/></set>')
    assert run.model["services"][0]["state"] == {"lastUnit": "uA2"}
    assert run.model["services"][1]["state"] == {"lastUnit": "uB1"}


def test_set_target_of_unset_variable_is_an_error(catalog):
    catalog.rules('<rule match="$">\n<set path="a" target="nothing">x</set></rule>')
    run = catalog.run()
    assert run.status == "error"
    assert "context variable 'nothing' is not set" in run.errors[0]
    assert "main.xml:3" in run.errors[0]


def test_set_config_is_an_error(catalog):
    path = catalog.rules('<rule match="$">\n<set path="##secret">x</set></rule>')
    run = catalog.run(config={"secret": "keep"})
    assert run.status == "error"
    assert f"{path}:3" in run.errors[0] and "read-only" in run.errors[0]


def test_set_without_path_is_an_error():
    with pytest.raises(WorkflowError, match="names no field"):
        evaluate("<set>x</set>")


def test_set_same_value_is_no_side_effect(catalog):
    model = {"id": "E", "things": [{"x": "1"}]}  # no id: matches on every pass
    catalog.rules('<rule id="same" match="$.things[*]"><set path="x">1</set></rule>')
    run = catalog.run(model, max_passes=5)
    assert run.status == "success"
    assert run.trace.rounds[0]["changes"] == []
    assert len(run.hits("same")) == 1  # one pass: nothing changed


def test_set_changing_value_is_a_side_effect(catalog):
    model = {"id": "E", "things": [{"x": "0"}]}
    catalog.rules('<rule id="chg" match="$.things[*]"><set path="x">1</set></rule>')
    run = catalog.run(model)
    assert run.status == "success"
    changes = run.trace.rounds[0]["changes"]
    assert [(c["path"], c["value"], c["rule"]) for c in changes] == [("things.0.x", "1", "chg")]
    assert len(run.hits("chg")) == 2  # changed, so the workflow ran again


def test_set_equal_value_of_other_type_is_a_change(catalog):
    model = {"id": "E", "things": [{"x": 1}]}
    catalog.rules('<rule id="t" match="$.things[*]"><set path="x"><true/></set></rule>')
    run = catalog.run(model)
    assert run.model["things"][0]["x"] is True
    assert len(run.trace.rounds[0]["changes"]) == 1


def test_set_below_a_string_is_an_error_and_model_survives(catalog):
    path = catalog.rules(f'<rule match="{UNITS}">\n<set path="state.ok">1</set>\n'
                         '<set path="name.sub">x</set></rule>')
    run = catalog.run()
    assert run.status == "error"
    assert f"{path}:4" in run.errors[0]
    assert run.unit("uA1")["state"] == {"ok": "1"}
    assert run.unit("uA1")["name"] == "web_instance_1"
    assert "token" not in run.model


def test_select_all_same_path_on_two_sources(catalog):
    # whole-model query results are reused; results from context variables must not be
    catalog.rules('<rule match="$">'
                  '<set path="#first"><select path="services.0"/></set>'
                  '<set path="#second"><select path="services.1"/></set>'
                  '<set path="ids"><map>'
                  '<i name="first"><select-all source="first" path="$.units[*].id"/></i>'
                  '<i name="second"><select-all source="second" path="$.units[*].id"/></i>'
                  '</map></set></rule>')
    run = catalog.run()
    assert run.model["ids"] == {"first": ["uA1", "uA2"], "second": ["uB1"]}


def test_whole_model_query_sees_changes_made_in_between(catalog):
    # each unit looks for services not yet marked, then marks its own service:
    # a stale cached result would let every unit see the first answer
    catalog.rules(
        '<rule match="$.services[*].units[*]">'
        '<set path="state.unmarked">'
        '<select-all path="/$.services[?(not @.marked)].id"/></set>'
        '<set path="::marked"><true/></set></rule>')
    run = catalog.run()
    seen = {u["id"]: u["state"]["unmarked"]
            for s in run.model["services"] for u in s["units"]}
    assert seen == {"uA1": ["SvcA", "SvcB"], "uA2": ["SvcB"], "uB1": ["SvcB"]}
