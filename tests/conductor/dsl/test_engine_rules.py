"""Rules, muting, nesting and the re-run of workflows after side effects."""
from __future__ import annotations

import pytest

from fornace.common.errors import WorkflowError
from fornace.conductor.workflowfiles import load_workflows
from enginekit import UNITS, sample_model, send_command

SETTLE = ('<rule id="settle" match="$.flags[*]"><set path="done"><true/></set></rule>')


def flag_model(**extra):
    """sample model plus an id-less object that lets one rule change once."""
    model = sample_model()
    model["flags"] = [{"done": False}]
    model.update(extra)
    return model


# ------------------------------------------------------------ match

def test_match_attribute_filters_services(catalog):
    catalog.rules("<rule id=\"r\" match=\"$.services[?(@.type == 'msSqlServer')]\">"
                  '<set path="state.hit"><true/></set></rule>')
    run = catalog.run()
    assert run.hits("r") == ["SvcB"]
    assert "state" not in run.model["services"][0]
    assert run.model["services"][1]["state"] == {"hit": True}


def test_match_as_parameter_from_text_and_select(catalog):
    catalog.rules('<set path="#wanted">msSqlServer</set>\n'
                  '<rule id="r"><parameter name="match">'
                  "$.services[?(@.type == '<select path=\"#wanted\"/>')].units[*]"
                  '</parameter><set path="state.hit"><true/></set></rule>')
    run = catalog.run()
    assert run.status == "success", run.reports
    assert run.hits("r") == ["uB1"]


def test_match_parameter_that_is_not_a_string_is_an_error(catalog):
    path = catalog.rules('<rule id="r">\n<parameter name="match"><null/></parameter></rule>')
    run = catalog.run()
    assert run.status == "error"
    assert f"{path}:2" in run.errors[0] and "match parameter" in run.errors[0]


def test_match_without_leading_dollar(catalog):
    catalog.rules('<rule id="r" match="services[*].units[*]"><report text="x"/></rule>')
    run = catalog.run()
    assert run.hits("r") == ["uA1", "uA2", "uB1"]


def test_dollar_filter_tests_the_cursor_object_itself(catalog):
    catalog.rules(f'<rule id="u" match="{UNITS}">'
                  '<rule id="master" match="$[?(@.isMaster)]"><set path="state.master"><true/>'
                  '</set></rule></rule>')
    run = catalog.run()
    assert run.hits("u.master") == ["uA1"]
    assert run.unit("uA1")["state"] == {"master": True}
    assert "state" not in run.unit("uA2")


def test_dollar_alone_matches_the_cursor(catalog):
    catalog.rules('<rule id="root" match="$"><set path="seen"><select path="name"/></set></rule>')
    run = catalog.run()
    assert run.hits("root", round=1) == ["ENV1"]
    assert run.model["seen"] == "MyDataCenter"


def test_filter_on_a_dict_tests_its_values(catalog):
    model = {"id": "E", "byName": {"a": {"id": "x", "on": True}, "b": {"id": "y", "on": False}}}
    catalog.rules('<rule id="r" match="$.byName[?(@.on)]"><set path="hit"><true/></set></rule>')
    run = catalog.run(model)
    assert run.hits("r") == ["x"]
    assert run.model["byName"]["a"]["hit"] is True


def test_nested_rules_relative_to_parent_cursor(catalog):
    catalog.rules('<rule id="svc" match="$.services[*]">'
                  '<rule id="unit" match="$.units[*]">'
                  '<set path="state.service"><select path="::name"/></set>'
                  '<set path="state.siblings"><select-all path="::$.units[*].id"/></set>'
                  '</rule></rule>')
    run = catalog.run()
    assert run.hits("svc.unit") == ["uA1", "uA2", "uB1"]
    assert run.unit("uA2")["state"]["service"] == "web"
    assert run.unit("uB1")["state"]["service"] == "db"
    assert run.unit("uB1")["state"]["siblings"] == ["uB1"]


def test_nested_rule_with_root_and_parent_match(catalog):
    catalog.rules(f'<rule id="u" match="{UNITS}">'
                  "<rule id=\"db\" match=\"/$.services[?(@.type == 'msSqlServer')]\">"
                  '<report><parameter name="text"><select path="::name"/></parameter></report>'
                  '</rule>'
                  '<rule id=\"mates\" match="::$.units[?(@.isMaster)]">'
                  '<set path="state.masterOf"><select path="::name"/></set></rule>'
                  '</rule>')
    run = catalog.run()
    assert run.status == "success", run.reports
    # the db service is found once per unit: muted under "<unit>/SvcB"
    assert run.hits("u.db", round=1) == ["SvcB"] * 3
    assert run.texts() == ["MyDataCenter"] * 3
    # uA1's mates rule set masterOf: from then on the workflow has side
    # effects, so the bodies of uA2 and uB1 stop after their db rule (0.2)
    assert run.hits("u.mates") == ["uA1"]
    assert run.unit("uA1")["state"]["masterOf"] == "web"


def test_limit_caps_matches(catalog):
    catalog.rules(f'<rule id="lim" match="{UNITS}" limit="2">'
                  '<set path="state.seen"><true/></set></rule>')
    run = catalog.run()
    assert run.hits("lim") == ["uA1", "uA2"]
    assert "state" not in run.unit("uB1")


def test_limit_counts_muted_matches_too(catalog):
    catalog.rules(f'<rule id="pre" match="$"><mute rule="lim" id="uA1"/></rule>\n'
                  f'<rule id="lim" match="{UNITS}" limit="2">'
                  '<set path="state.seen"><true/></set></rule>')
    run = catalog.run()
    assert run.status == "success"
    # uA1 is muted but still takes one of the two places; uB1 never runs,
    # even in the passes after uA2 was handled (it is auto-muted then)
    assert run.hits("lim") == ["uA2"]
    assert "state" not in run.unit("uA1") and "state" not in run.unit("uB1")


def test_limit_from_parameter(catalog):
    catalog.rules(f'<rule id="lim" match="{UNITS}"><parameter name="limit"><int>1</int>'
                  '</parameter><report text="x"/></rule>')
    assert catalog.run().hits("lim") == ["uA1"]


# ------------------------------------------------------------ empty

def test_empty_runs_when_nothing_matched(catalog):
    catalog.rules("<rule id=\"r\" match=\"$.services[?(@.type == 'nothing')]\">"
                  '<report text="matched"/>'
                  '<empty><set path="none"><true/></set><report text="empty"/></empty></rule>\n'
                  + SETTLE)
    run = catalog.run(flag_model())
    assert run.model["none"] is True
    # 0.2 never mutes <empty>: it runs in each of the round's three passes
    assert run.texts() == ["empty"] * 3
    assert run.hits("r#empty") == ["ENV1"] * 3


def test_empty_not_run_when_something_matched(catalog):
    catalog.rules("<rule id=\"r\" match=\"$.services[*]\"><report text=\"matched\"/>"
                  '<empty><report text="empty"/></empty></rule>')
    assert catalog.run().texts() == ["matched", "matched"]


def test_empty_of_nested_rule_sees_parent_cursor(catalog):
    catalog.rules(f'<rule id="u" match="{UNITS}"><rule id="m" match="$[?(@.isMaster)]">'
                  '<empty><set path="state.slave"><true/></set></empty></rule></rule>')
    run = catalog.run()
    assert "state" not in run.unit("uA1")
    assert run.unit("uA2")["state"] == {"slave": True}
    assert run.unit("uB1")["state"] == {"slave": True}


# ------------------------------------------------------------ automatic mutes

def test_object_matched_once_per_round(catalog):
    catalog.rules(f'<rule id="count" match="{UNITS}"><report text="seen"/></rule>\n' + SETTLE)
    run = catalog.run(flag_model())
    assert run.status == "success"
    # the settle rule changed the model, so the workflow ran twice, but the
    # units were muted for "count" after their first match
    assert len(run.hits("settle")) == 2
    assert run.hits("count") == ["uA1", "uA2", "uB1"]


def test_objects_without_id_are_never_muted(catalog):
    model = flag_model(things=[{"name": "a"}, {"name": "b"}])
    catalog.rules('<rule id="noid" match="$.things[*]"><report text="t"/></rule>\n' + SETTLE)
    run = catalog.run(model)
    assert run.hits("noid") == ["things.0", "things.1", "things.0", "things.1"]


def test_same_id_under_other_rules_is_not_muted(catalog):
    catalog.rules(f'<rule id="a" match="{UNITS}"><report text="a"/></rule>\n'
                  f'<rule id="b" match="{UNITS}"><report text="b"/></rule>')
    run = catalog.run()
    assert run.hits("a") == run.hits("b") == ["uA1", "uA2", "uB1"]


def _phases(body: str = "") -> str:
    """A unit rule reported each match, taking two rounds of commands."""
    return (f'<rule id="count" match="{UNITS}">{body}<report text="match"/>'
            '<rule id="one" match="$[?(@.state.phase is None)]">'
            + send_command("Tpl", body='<success><set path="state.phase">one</set></success>')
            + '</rule><rule id="two" match="$[?(@.state.phase == \'one\')]">'
            + send_command("Tpl", body='<success><set path="state.phase">two</set></success>')
            + '</rule></rule>\n' + SETTLE)


def test_automatic_mutes_reset_after_actions_run(catalog):
    catalog.agent("Tpl")
    catalog.rules(_phases())
    run = catalog.run(flag_model())
    assert run.status == "success", run.reports
    assert run.outcome.rounds == 3
    for round in (1, 2, 3):
        assert run.hits("count", round) == ["uA1", "uA2", "uB1"]
    assert [u["state"]["phase"] for s in run.model["services"] for u in s["units"]] \
        == ["two"] * 3
    assert len(run.agents.plans) == 6


def test_permanent_mute_lasts_across_rounds(catalog):
    catalog.agent("Tpl")
    catalog.rules(_phases("<mute/>"))
    run = catalog.run(flag_model())
    assert run.status == "success", run.reports
    assert run.hits("count") == ["uA1", "uA2", "uB1"]  # round 1 only
    assert run.hits("count", 2) == []
    assert run.unit("uA1")["state"]["phase"] == "one"
    assert len(run.agents.plans) == 3


def test_mute_explicit_rule_and_id(catalog):
    catalog.rules('<rule id="first" match="$"><mute rule="second" id="uA2"/></rule>\n'
                  f'<rule id="second" match="{UNITS}"><report text="x"/></rule>')
    run = catalog.run()
    assert run.hits("second") == ["uA1", "uB1"]


def test_mute_with_id_from_parameter(catalog):
    catalog.rules('<rule id="first" match="$.services[0].units[0]">'
                  '<mute rule="second"><parameter name="id"><select path=":1.id"/></parameter>'
                  '</mute></rule>\n'
                  f'<rule id="second" match="{UNITS}"><report text="x"/></rule>')
    assert catalog.run().hits("second") == ["uA1", "uB1"]


def test_nested_rule_ids_joined_by_dot(catalog):
    # the object key of a nested match is "<parent key>/<id>"
    catalog.rules('<rule id="muter" match="$"><mute rule="outer.inner" id="SvcB/uB1"/></rule>\n'
                  '<rule id="outer" match="$.services[*]">'
                  '<rule id="inner" match="$.units[*]"><report text="x"/></rule></rule>')
    run = catalog.run()
    assert run.hits("outer.inner") == ["uA1", "uA2"]


def test_nested_rule_ids_joined_by_slash_as_0_2_did(catalog):
    catalog.rules('<rule id="muter" match="$"><mute rule="outer/inner" id="SvcA/uA2"/></rule>\n'
                  '<rule id="outer" match="$.services[*]">'
                  '<rule id="inner" match="$.units[*]"><report text="x"/></rule></rule>')
    assert catalog.run().hits("outer.inner") == ["uA1", "uB1"]


def test_rule_id_with_a_separator_is_refused(catalog):
    path = catalog.rules('<rule id="a/b" match="$"><report text="x"/></rule>')
    with pytest.raises(WorkflowError, match=r"main.xml:2: <rule> id 'a/b' must not contain"):
        load_workflows(path.parent)


def test_mute_inside_nested_rule_defaults_to_full_id(catalog):
    catalog.agent("Tpl")
    catalog.rules('<rule id="outer" match="$.services[*]">'
                  '<rule id="inner" match="$.units[*]"><mute/>'
                  + send_command("Tpl") + '</rule></rule>')
    run = catalog.run()
    assert run.status == "success"
    assert run.outcome.rounds == 2  # muted for good: round 2 queues nothing
    assert run.hits("outer.inner") == ["uA1", "uA2", "uB1"]


def test_unmute_lets_the_rule_match_again(catalog):
    catalog.rules(f'<rule id="a" match="{UNITS}"><mute/><report text="a"/></rule>\n'
                  '<rule id="b" match="$.services[0].units[?(@.state.unmuted is None)]">'
                  '<unmute rule="a" id="uA1"/><set path="state.unmuted"><true/></set></rule>')
    run = catalog.run()
    assert run.status == "success"
    assert run.hits("a") == ["uA1", "uA2", "uB1", "uA1"]


def test_unmute_without_arguments_unmutes_the_current_object(catalog):
    # 0.2 takes the current rule and object, as <mute/> does: the automatic
    # mute of this match is lifted, so the object matches again next pass
    catalog.rules(f'<rule id="a" match="{UNITS}"><unmute/><report text="a"/></rule>\n' + SETTLE)
    run = catalog.run(flag_model())
    assert run.status == "success", run.reports
    assert run.hits("a") == ["uA1", "uA2", "uB1"] * 2  # both passes of the round


def test_mute_of_object_without_id_does_nothing(catalog):
    catalog.rules('<rule id="a" match="$.things[*]"><mute/><report text="t"/></rule>\n' + SETTLE)
    run = catalog.run(flag_model(things=[{"x": 1}]))
    assert run.status == "success", run.reports
    assert run.texts() == ["t", "t"]  # never muted: matched in both passes


# ------------------------------------------------------------ workflow re-runs

def test_workflow_returns_after_top_level_rule_with_side_effects(catalog):
    catalog.rules('<rule id="A1" match="$"><set path="a1"><true/></set></rule>\n'
                  '<rule id="A2" match="$"><report text="A2"/></rule>', "a.xml")
    catalog.rules('<rule id="B1" match="$"><report text="B1"/></rule>', "b.xml")
    run = catalog.run()
    order = [hit["rule"] for hit in run.trace.rounds[0]["rules"]]
    # pass 1: A1 changes the model, a.xml returns, b.xml still runs;
    # pass 2: every file runs again and A2 gets its turn
    assert order == ["A1", "B1", "A2"]


def test_side_effect_in_nested_rule_finishes_the_top_level_rule(catalog):
    catalog.rules('<rule id="top" match="$.services[*]">'
                  '<rule id="in" match="$.units[*]"><set path="state.x"><true/></set></rule>'
                  '<report text="after inner"/></rule>\n'
                  '<rule id="next" match="$"><report text="next"/></rule>')
    run = catalog.run()
    order = [hit["rule"] for hit in run.trace.rounds[0]["rules"]]
    assert order == ["top", "top.in", "top.in", "top", "top.in", "next"]
    # 0.2: after a nested rule with side effects the rest of the body is
    # skipped for that match; the services stay muted for the round
    assert run.texts() == ["next"]


def test_body_after_nested_rule_runs_while_the_workflow_has_no_side_effects(catalog):
    catalog.rules('<rule id="top" match="$.services[*]">'
                  '<rule id="in" match="$.units[*]"><report text="in"/></rule>'
                  '<report text="after"/></rule>')
    assert catalog.run().texts() == ["in", "in", "after", "in", "after"]


def test_side_effect_of_an_earlier_match_cuts_later_bodies_too(catalog):
    # the flag is the workflow's: once SvcA's body changed the model, SvcB's
    # body stops after its nested rule although that rule changed nothing
    catalog.rules('<rule id="top" match="$.services[*]">'
                  '<set path="state.seen"><true/></set>'
                  '<rule id="in" match="$.units[?(@.never)]"><report text="in"/></rule>'
                  '<report><parameter name="text"><select path="id"/></parameter></report>'
                  '</rule>')
    run = catalog.run()
    assert run.texts() == []
    assert all(s["state"]["seen"] for s in run.model["services"])


def test_side_effects_outside_rules_do_not_end_the_workflow_early(catalog):
    catalog.rules('<set path="#v">x</set>\n'
                  '<rule id="r1" match="$"><report text="r1"/></rule>\n'
                  '<rule id="r2" match="$"><report text="r2"/></rule>')
    run = catalog.run()
    assert run.texts() == ["r1", "r2"]


def test_files_loaded_and_run_in_sorted_order(catalog):
    for name in ("b.xml", "10-first.xml", "a.xml"):
        catalog.rules(f'<rule id="{name[:-4]}" match="$"><report text="{name}"/></rule>', name)
    catalog.file("workflows/ignored.txt", "<workflow><bogus/></workflow>")
    assert [w.path.name for w in load_workflows(catalog.workflows)] \
        == ["10-first.xml", "a.xml", "b.xml"]
    assert catalog.run().texts() == ["10-first.xml", "a.xml", "b.xml"]


def test_later_file_sees_changes_of_earlier_file(catalog):
    catalog.rules(f'<rule id="mk" match="{UNITS}"><set path="state.ready"><true/></set></rule>',
                  "1.xml")
    catalog.rules('<rule id="use" match="$.services[*].units[?(@.state.ready)]">'
                  '<set path="state.used"><true/></set></rule>', "2.xml")
    run = catalog.run()
    assert run.hits("use") == ["uA1", "uA2", "uB1"]
    assert run.outcome.rounds == 1


def test_rule_ids_are_per_file_for_mutes(catalog):
    # the same rule id in two files: each file has its own mutes
    catalog.rules(f'<rule id="r" match="{UNITS}"><report text="one"/></rule>', "1.xml")
    catalog.rules(f'<rule id="r" match="{UNITS}"><report text="two"/></rule>', "2.xml")
    run = catalog.run()
    assert run.texts().count("one") == 3 and run.texts().count("two") == 3


def test_auto_generated_rule_id_from_line(catalog):
    catalog.rules(f'\n<rule match="{UNITS}"><report text="x"/></rule>')
    run = catalog.run()
    assert run.hits("line3") == ["uA1", "uA2", "uB1"]
