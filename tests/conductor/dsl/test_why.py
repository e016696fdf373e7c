"""``fornace why``'s engine: a filter clause by clause, a rule object by object."""
from __future__ import annotations

import pytest

from fornace.common.errors import ExpressionError, UnknownName
from fornace.conductor.dsl.clauses import clause_tree, explain, failing, holding, match_cause
from fornace.conductor.dsl.filters import compile_filter
from fornace.conductor.dsl.query import compile_query
from fornace.conductor.dsl.why import explain_rule
from fornace.conductor.dsl.workflows import compile_workflow

FILTER = "@.type in ('kv', 'db') and (@.state.hostname and not @.state.kvDeployed) or @.n > 2"


def test_clauses_keep_their_text_and_evaluate_as_the_compiled_filter():
    tree = clause_tree(FILTER)
    assert (tree.kind, [p.kind for p in tree.parts]) == ("or", ["and", "test"])
    inner = tree.parts[0].parts[1]
    assert (inner.text, inner.kind) == ("@.state.hostname and not @.state.kvDeployed", "and")
    assert inner.parts[1].text == "not @.state.kvDeployed"
    for node in ({"type": "kv", "state": {"hostname": "h"}}, {"type": "kv", "n": 3},
                 {"type": "db", "state": {"hostname": "h", "kvDeployed": True}}, {}, None, 7):
        assert bool(tree.fn(node)) == bool(compile_filter(FILTER)(node))
    with pytest.raises(ExpressionError, match="function calls are not allowed"):
        clause_tree("len(@.a)")


def test_a_false_filter_names_the_clause_that_failed_and_the_values_it_read():
    unit = {"type": "kv", "state": {"hostname": "kv-1", "kvDeployed": True}, "n": None}
    assert failing(clause_tree(FILTER), unit) == [
        "not @.state.kvDeployed is false: state.kvDeployed = true",
        "@.n > 2 is false: n = null"]
    # the first false term of an "and"; a missing key is "absent", not null
    assert failing(clause_tree("@.type == 'kv' and @.state.x == 1 and @.z"), unit) == [
        "@.state.x == 1 is false: state.x = absent"]
    assert failing(clause_tree("not (@.type == 'kv' or @.z)"), unit) == [
        "@.type == 'kv' is true: type = 'kv'"]
    assert holding(clause_tree(FILTER), {"type": "db", "state": {"hostname": "h"}}) == [
        "@.type in ('kv', 'db') is true: type = 'db'",
        "@.state.hostname is true: state.hostname = 'h'",
        "not @.state.kvDeployed is true: state.kvDeployed = absent"]
    tree = explain(clause_tree("@.adminPassword == 'x' or @.name"), {"adminPassword": "pw"})
    assert tree["value"] is False
    assert [p["reads"] for p in tree["parts"]] == [["adminPassword = '***'"], ["name = absent"]]


def test_a_match_cause_reads_the_objects_each_filter_tested():
    from fornace.common.cursor import Cursor
    service = {"type": "kv", "units": [{"id": "u", "state": {}}]}
    root = Cursor({"services": [service]})
    query = compile_query("$.services[?(@.type == 'kv')].units[?(not @.state.kvDeployed)]")
    [unit] = query.find(root)
    assert match_cause(query, unit) == ["services.0.type: 'kv'", "state.kvDeployed: absent"]
    assert match_cause(compile_query("$..units[?(@.a)]"), unit) == []   # depth unknown


WORKFLOW = b"""<workflow>
  <rule match="$.services[*].units[?(not @.state.hostname)]" desc="Units without a hostname">
    <set path="state.hostname">h</set>
  </rule>
  <rule match="$.services[?(@.type == 'kv')].units[?(@.state.hostname and not @.state.kvDeployed)]"
        desc="Deploy kv">
    <send-command template="DeployKv" service="x" unit="y">
      <success><set path="state.kvDeployed"><true/></set></success>
    </send-command>
  </rule>
  <rule id="ready" match="$.services[?(@.type == 'kv')]">
    <rule id="pending" match="$.units[?(not @.state.kvDeployed)]" limit="1"/>
  </rule>
</workflow>"""


def model():
    return {"id": "e", "services": [
        {"id": "s1", "type": "kv", "units": [
            {"id": "u1", "name": "kv_0", "state": {"hostname": "kv-1", "kvDeployed": True}},
            {"id": "u2", "name": "kv_1", "state": {"hostname": "kv-2"}}]},
        {"id": "s2", "type": "web", "units": [{"id": "u3", "state": {"hostname": "web-1"}}]}]}


@pytest.fixture
def workflows(tmp_path):
    return [compile_workflow(WORKFLOW, tmp_path / "Kv.xml")]


def test_a_rule_explained_per_unit(workflows):
    answer = explain_rule(workflows, model(), "Deploy kv")
    assert answer["rule"]["at"] == "Kv.xml:6" and answer["matched"] == 1
    by_host = {o["host"]: o for o in answer["objects"]}
    assert by_host["kv-2"]["matched"] and by_host["kv-2"]["because"] == [
        "services.0: @.type == 'kv' is true: type = 'kv'",
        "@.state.hostname is true: state.hostname = 'kv-2'",
        "not @.state.kvDeployed is true: state.kvDeployed = absent"]
    refused = by_host["kv-1"]["refused"]
    assert refused["step"] == "[?(@.state.hostname and not @.state.kvDeployed)]"
    assert refused["because"] == ["not @.state.kvDeployed is false: state.kvDeployed = true"]
    # refused by the type filter, tested on its service
    web = by_host["web-1"]["refused"]
    assert (web["step"], web["object"]) == ("[?(@.type == 'kv')]", "services.1")
    assert web["because"] == ["@.type == 'kv' is false: type = 'web'"]
    assert answer["does"] == ["send-command template=DeployKv",
                              "on success: set path=state.kvDeployed"]


def test_a_nested_rule_and_one_unit_by_its_hostname_name_or_id(workflows):
    for unit in ("kv-1", "kv_0", "u1"):
        answer = explain_rule(workflows, model(), "ready.pending", unit)
        assert [o["object"] for o in answer["objects"]] == ["services.0.units.0"]
        assert answer["unit"]["host"] == "kv-1" and answer["rule"]["enclosing"] == ["Kv.xml:11"]
    [entry] = explain_rule(workflows, model(), "Kv.xml:12", "web-1")["objects"]
    assert entry["refused"]["rule"] == "Kv.xml:11"     # the enclosing rule refused its service


def test_unknown_or_ambiguous_names_say_which_names_were_meant(workflows, tmp_path):
    with pytest.raises(UnknownName, match="no rule is named 'Deploy kvv'") as caught:
        explain_rule(workflows, model(), "Deploy kvv")
    assert caught.value.close[0] == "Deploy kv"
    with pytest.raises(UnknownName, match="no unit has the id, hostname or name 'kv-3'; close names: 'kv-2', 'kv-1'"):
        explain_rule(workflows, model(), "Deploy kv", "kv-3")
    both = workflows + [compile_workflow(WORKFLOW, tmp_path / "Other.xml")]
    with pytest.raises(UnknownName, match="2 rules are named 'line6'") as caught:
        explain_rule(both, model(), "line6")
    assert caught.value.close == ["Kv.xml:6", "Other.xml:6"]
    assert explain_rule(both, model(), "Other.xml:line6")["rule"]["at"] == "Other.xml:6"


def test_a_match_given_as_a_parameter_is_evaluated_in_each_enclosing_match(tmp_path):
    workflow = compile_workflow(b"""<workflow>
  <rule id="svc" match="$.services[*]">
    <rule id="peers">
      <parameter name="match">/$.services[?(@.type == '<select path="type"/>' and @.id != '<select path="id"/>')]</parameter>
    </rule>
    <rule id="computed"><parameter name="match"><select-all path="units"/></parameter></rule>
  </rule>
</workflow>""", tmp_path / "P.xml")
    model = {"services": [{"id": "a", "type": "kv"}, {"id": "b", "type": "kv"},
                          {"id": "c", "type": "web"}]}
    answer = explain_rule([workflow], model, "svc.peers")
    found = {(o["within"], o["object"]): o.get("refused", {}).get("because")
             for o in answer["objects"]}
    assert found[("services.0", "services.1")] is None            # a's peer: b
    assert found[("services.0", "services.0")] == ["@.id != 'a' is false: id = 'a'"]
    assert found[("services.2", "services.0")] == ["@.type == 'web' is false: type = 'kv'"]
    assert answer["matched"] == 2
    computed = explain_rule([workflow], model, "svc.computed")
    assert computed["objects"] == [] and "cannot be evaluated here" in computed["problem"]

