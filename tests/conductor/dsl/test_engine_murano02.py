"""The roads Murano 0.2 took, not only where it arrived.

Workflows here have the shapes of real 0.2 workflow files (a unit rule whose
nested rule finds the domain controller, cluster commands that collect the
hostnames of a service's units with a relative ``select-all``); the tests
check how many rounds a deployment takes and what each command carried.
"""
from __future__ import annotations

from typing import Any

from enginekit import send_command

DOMAIN = "corp.example"

#: 0.2's per-unit domain join: the outer rule matches each unit that must
#: enter its domain, the nested rule finds that domain's controller.
JOIN = (
    '<rule desc="Units that must enter their domain" '
    'match="$..units[?(@.temp.instanceName and @.domain and @.domain != @.state.domain)]">'
    '<set path="#unit"><select/></set>'
    '<set path="#service"><select path="::"/></set>'
    '<rule desc="The controller of that domain, once it has a DNS address">'
    "<parameter name=\"match\">/$.services[?(@.type == 'activeDirectory' and "
    "@.domain == '<select path=\"domain\"/>' and @.state.primaryDcIp)]</parameter>"
    '<send-command template="JoinDomain">'
    '<parameter name="unit"><select path="id" source="unit"/></parameter>'
    '<parameter name="service"><select path="id" source="service"/></parameter>'
    '<parameter name="mappings"><map>'
    '<m name="domain"><select path="domain"/></m>'
    '<m name="dnsIp"><select path="state.primaryDcIp"/></m>'
    '</map></parameter>'
    '<success><set path="state.domain" target="unit"><select path="domain"/></set></success>'
    '</send-command></rule></rule>')


def domain_model(units: int, services: int = 1) -> dict[str, Any]:
    """One ready controller and ``units`` member units (instances up) over services."""
    members = []
    for s in range(services):
        count = units // services + (1 if s < units % services else 0)
        members.append({
            "id": f"web{s}", "name": f"web{s}", "type": "webServer",
            "units": [{"id": f"w{s}u{u}", "name": f"web{s}_instance_{u}", "domain": DOMAIN,
                       "temp": {"instanceName": f"web{s}_instance_{u}"}}
                      for u in range(count)]})
    directory = {"id": "ad", "name": "ad", "type": "activeDirectory", "domain": DOMAIN,
                 "state": {"primaryDcIp": "10.0.0.5"},
                 "units": [{"id": "dc1", "name": "ad_instance_0", "isMaster": True}]}
    return {"id": "ENV", "name": "env", "services": [directory, *members]}


def joins_per_round(run) -> list[int]:
    return [sum(1 for a in entry["actions"] if a["template"] == "JoinDomain")
            for entry in run.trace.rounds]


def test_every_unit_joins_the_domain_in_one_round(catalog):
    catalog.agent("JoinDomain")
    catalog.rules(JOIN)
    for units in (4, 201):
        run = catalog.run(domain_model(units, services=3))
        assert run.status == "success", run.reports
        assert joins_per_round(run) == [units, 0]  # round 2 only finds nothing left
        assert sorted(p.unit for p in run.agents.plans) == sorted(
            u["id"] for s in run.model["services"][1:] for u in s["units"])
        assert all(u["state"]["domain"] == DOMAIN
                   for s in run.model["services"][1:] for u in s["units"])


def test_thousand_units_converge_within_the_default_round_limit(catalog):
    catalog.agent("JoinDomain")
    catalog.rules(JOIN)
    run = catalog.run(domain_model(1000, services=4))
    assert run.status == "success", run.errors
    assert run.outcome.rounds == 2
    assert joins_per_round(run)[0] == 1000


def test_controller_is_muted_per_unit_within_a_pass(catalog):
    # the nested match is muted under "<unit key>/<controller id>": a second
    # pass of the same round finds nothing new, so no unit is sent twice
    catalog.agent("JoinDomain")
    catalog.rules(JOIN + '<rule match="$.flags[*]"><set path="done"><true/></set></rule>')
    model = domain_model(3)
    model["flags"] = [{"done": False}]
    run = catalog.run(model)
    assert run.status == "success", run.reports
    assert joins_per_round(run) == [3, 0]
    hits = [(h["rule"].count("."), h["id"]) for h in run.trace.rounds[0]["rules"]]
    assert hits.count((1, "ad")) == 3  # once per unit


def test_objects_under_an_id_less_parent_are_never_muted(catalog):
    model = {"id": "E", "groups": [{"members": [{"id": "m1"}, {"id": "m2"}]}],
             "flags": [{"done": False}]}
    catalog.rules('<rule id="g" match="$.groups[*]">'
                  '<rule id="m" match="$.members[*]"><report text="m"/></rule></rule>\n'
                  '<rule match="$.flags[*]"><set path="done"><true/></set></rule>')
    run = catalog.run(model)
    # pass 1 and pass 2 of the round both see both members: key '#'
    assert run.texts() == ["m", "m", "m", "m"]


def test_object_with_id_under_top_level_rule_is_muted_by_its_bare_id(catalog):
    catalog.rules('<rule id="first" match="$"><mute rule="units" id="uA2"/></rule>\n'
                  '<rule id="units" match="$.services[*].units[*]"><report text="u"/></rule>')
    assert catalog.run().hits("units") == ["uA1", "uB1"]


# ---------------------------------------------------------------- cluster

CLUSTER = (
    "<rule limit=\"1\" match=\"$.services[?(@.type == 'msSqlClusterServer' and "
    'not @.state.clusterCreated)].units[*]">'
    + send_command("FailoverCluster", mappings=(
        '<map><m name="nodes"><select-all path=":$[*].state.hostname"/></m>'
        '<m name="primary"><select-single path=":$[?(@.isMaster)].state.hostname"/></m>'
        '<m name="sync"><select-all path=":$[?(@.isSync)].state.hostname"/></m>'
        '<m name="none"><select-single path=":$[?(@.isWitness)].state.hostname"/></m>'
        '</map>'), body='<success><set path="::state.clusterCreated"><true/></set></success>')
    + '</rule>')


def cluster_model() -> dict[str, Any]:
    return {"id": "E", "services": [{
        "id": "sql", "name": "sql", "type": "msSqlClusterServer", "units": [
            {"id": "n1", "name": "sql_instance_0", "state": {"hostname": "node1"}},
            {"id": "n2", "name": "sql_instance_1", "isMaster": True, "isSync": True,
             "state": {"hostname": "node2"}},
            {"id": "n3", "name": "sql_instance_2", "isSync": False,
             "state": {"hostname": "node3"}}]}]}


def test_cluster_commands_carry_the_node_list_and_the_primary(catalog):
    catalog.agent("FailoverCluster")
    catalog.rules(CLUSTER)
    run = catalog.run(cluster_model())
    assert run.status == "success", run.reports
    plans = run.agents.plans
    assert len(plans) == 1 and plans[0].unit == "n1"
    mappings = run.actions()[0]["mappings"]
    assert mappings["nodes"] == ["node1", "node2", "node3"]
    assert mappings["primary"] == "node2"
    assert mappings["sync"] == ["node2"]
    assert mappings["none"] is None
    assert run.model["services"][0]["state"]["clusterCreated"] is True


def test_select_from_the_root_runs_on_the_model_unwrapped(catalog):
    catalog.rules('<rule match="$.services[*].units[?(@.isMaster)]">'
                  '<set path="state.all"><select-all path="/$.services[*].units[*].state.hostname"/>'
                  '</set><set path="state.first"><select-single path="/$..hostname"/></set></rule>')
    run = catalog.run(cluster_model())
    state = run.model["services"][0]["units"][1]["state"]
    assert state["all"] == ["node1", "node2", "node3"]
    assert state["first"] == "node1"
