"""The workflow loop: rounds, limits, errors and the final model."""
from __future__ import annotations

import pytest

from fornace.common.errors import FornaceError
from fornace.conductor.dsl.context import EvaluationContext, Templates
from fornace.conductor.executors.simulator import Fault, SimulatedCloud
from fornace.conductor.session import Session, Settings, clean_model
from fornace.conductor.templates import TemplateStore
from fornace.conductor.workflowfiles import load_workflows
from enginekit import UNITS, sample_model, send_command


def test_no_workflows_is_one_quiet_round(catalog):
    run = catalog.run()
    assert run.status == "success" and run.outcome.rounds == 1 and run.reports == []


def test_model_must_be_an_object(catalog):
    stacks, agents = SimulatedCloud().executors()
    with pytest.raises(FornaceError, match="the object model must be a JSON object"):
        Session([], [], TemplateStore(catalog.root), stacks, agents)


def test_rounds_count_action_rounds_plus_the_final_one(catalog):
    catalog.agent("Tpl")
    catalog.rules(f'<rule match="{UNITS}"><rule match="$[?(@.state.step is None)]">'
                  + send_command("Tpl", body='<success><set path="state.step">1</set></success>')
                  + "</rule><rule match=\"$[?(@.state.step == '1')]\">"
                  + send_command("Tpl", body='<success><set path="state.step">2</set></success>')
                  + '</rule></rule>')
    run = catalog.run()
    assert run.status == "success"
    assert run.outcome.rounds == 3
    assert [len(r["actions"]) for r in run.trace.rounds] == [3, 3, 0]
    assert all(a["outcome"] == "success" for a in run.actions())


def test_round_limit_stops_a_workflow_that_requeues_forever(catalog):
    catalog.agent("Tpl")
    path = catalog.rules(f'<rule id="forever" match="{UNITS}">\n'
                         + send_command("Tpl") + '</rule>')
    run = catalog.run(max_rounds=3)
    assert run.status == "error"
    assert len(run.agents.plans) == 9  # three rounds of three units ran
    [error] = run.reports
    assert error["level"] == "error" and error["entity"] == "environment"
    assert error["id"] == "ENV1"
    assert "after 3 rounds" in error["text"]
    assert "forever" in error["text"]
    # the firing rule is named with the file:line of the element that queued
    assert f"{path}:3" in error["text"]
    assert "token" not in run.model
    assert run.outcome.rounds == 4  # the 4th round found actions to run again


def _two_step_catalog(catalog):
    catalog.agent("Tpl")
    catalog.rules(f'<rule id="u" match="{UNITS}"><rule id="a" match="$[?(@.state.step is None)]">'
                  + send_command("Tpl", body='<success><set path="state.step">1</set></success>')
                  + "</rule><rule id=\"b\" match=\"$[?(@.state.step == '1')]\">"
                  + send_command("Tpl", body='<success><set path="state.step">2</set></success>')
                  + '</rule></rule>')


def test_round_limit_allows_exactly_max_rounds_of_actions(catalog):
    _two_step_catalog(catalog)
    run = catalog.run(max_rounds=2)
    # two rounds of commands, then a quiet round: nothing was left to do
    assert run.status == "success", run.reports
    assert run.outcome.rounds == 3
    assert run.unit("uB1")["state"] == {"step": "2"}


def test_round_limit_one_short(catalog):
    _two_step_catalog(catalog)
    run = catalog.run(max_rounds=1)
    assert run.status == "error"
    assert len(run.agents.plans) == 3  # only the first round ran
    assert run.unit("uA1")["state"] == {"step": "1"}
    [error] = run.errors
    assert "after 1 rounds" in error and "u.b at " in error
    # what the last round queued never ran
    assert [a["outcome"] for a in run.actions(2)] == ["cancelled"] * 3


def test_pass_limit_stops_a_toggle_on_an_object_without_id(catalog):
    model = sample_model()
    model["switches"] = [{"flag": "a"}]
    path = catalog.rules("<rule id=\"toA\" match=\"$.switches[?(@.flag == 'b')]\">"
                         '<set path="flag">a</set></rule>\n'
                         "<rule id=\"toB\" match=\"$.switches[?(@.flag == 'a')]\">"
                         '<set path="flag">b</set></rule>')
    run = catalog.run(model, max_passes=20)
    assert run.status == "error"
    [error] = run.errors
    assert "did not reach a fixpoint after 20 passes" in error
    assert f"toA at {path}:2" in error and f"toB at {path}:3" in error
    assert run.model["switches"][0]["flag"] in ("a", "b")
    assert run.outcome.rounds == 1


def test_toggle_on_object_with_id_is_stopped_by_mutes(catalog):
    model = sample_model()
    model["switches"] = [{"id": "sw", "flag": "a"}]
    catalog.rules("<rule id=\"toA\" match=\"$.switches[?(@.flag == 'b')]\">"
                  '<set path="flag">a</set></rule>\n'
                  "<rule id=\"toB\" match=\"$.switches[?(@.flag == 'a')]\">"
                  '<set path="flag">b</set></rule>')
    run = catalog.run(model, max_passes=20)
    assert run.status == "success"
    assert run.model["switches"][0]["flag"] == "a"  # a -> b -> a, then both muted


def test_exception_in_rule_gives_error_report_and_returns_model(catalog):
    catalog.rules(f'<rule id="ok" match="{UNITS}"><set path="state.before"><true/></set></rule>\n'
                  '<rule id="bad" match="$.services[1]">\n'
                  '  <set path="state.n"><int>abc</int></set>\n'
                  '</rule>')
    run = catalog.run()
    assert run.status == "error"
    [error] = run.reports
    assert error["level"] == "error" and error["entity"] == "environment"
    path = catalog.workflows / "main.xml"
    assert f"{path}:4" in error["text"] and "'abc' is not an integer" in error["text"]
    assert run.unit("uA1")["state"] == {"before": True}
    assert "token" not in run.model


def test_unknown_agent_template_names_the_workflow_element(catalog):
    path = catalog.rules(f'<rule match="{UNITS}">\n' + send_command("NoSuchPlan") + '</rule>')
    run = catalog.run()
    assert run.status == "error"
    [error] = run.errors
    assert "'NoSuchPlan' not found" in error
    assert f"{path}:3" in error


def test_unknown_heat_template_names_the_workflow_element(catalog):
    path = catalog.rules('<rule match="$">\n<update-cf-stack template="Nope"/></rule>')
    run = catalog.run()
    assert run.status == "error"
    assert "'Nope' not found" in run.errors[0] and f"{path}:3" in run.errors[0]


def test_invalid_template_json_is_an_error_with_its_line(catalog):
    template = catalog.file("templates/cf/Bad.template", '{\n  "a": 1,\n  oops\n}')
    catalog.rules('<rule match="$"><update-cf-stack template="Bad"/></rule>')
    run = catalog.run()
    assert run.status == "error"
    assert f"{template}:3" in run.errors[0]


def test_missing_script_is_an_error(catalog):
    catalog.agent("Tpl", scripts=("Missing.ps1",))
    catalog.rules(f'<rule match="{UNITS}">' + send_command("Tpl") + '</rule>')
    run = catalog.run()
    assert run.status == "error" and "Missing.ps1" in run.errors[0]


def test_template_escaping_catalog_is_an_error(catalog, tmp_path):
    (tmp_path / "evil.template").write_text('{"Resources": {"leak": {}}}')
    for name in ("../../../evil", str(tmp_path / "evil"), "..\\evil"):
        catalog.rules(f'<rule match="$"><update-cf-stack template="{name}"/></rule>')
        run = catalog.run()
        assert run.status == "error", name
        assert "must stay inside" in run.errors[0]
        assert run.stacks.stacks == {}


def test_error_in_success_callback_is_reported(catalog):
    catalog.agent("Tpl")
    path = catalog.rules(f'<rule match="{UNITS}"><mute/>'
                         + send_command("Tpl", body='<success>\n<int>x</int></success>')
                         + '</rule>')
    run = catalog.run()
    assert run.status == "error"
    assert f"{path}:3" in run.errors[0]


def test_broken_reporter_does_not_lose_the_model(catalog):
    catalog.rules('<rule match="$"><set path="x"><true/></set><report text="hi"/></rule>')
    stacks, agents = SimulatedCloud().executors()
    calls = []

    def reporter(body):
        calls.append(body["text"])
        raise RuntimeError("api down")

    outcome = Session(sample_model(), load_workflows(catalog.workflows), catalog.store(),
                      stacks, agents, Settings(), reporter=reporter).run()
    # a report that cannot be sent is logged; the deployment goes on
    assert outcome.status == "success"
    assert outcome.model["id"] == "ENV1" and outcome.model["x"] is True
    assert "token" not in outcome.model
    assert calls == ["hi"]
    assert [r["text"] for r in outcome.reports] == ["hi"]


def test_token_and_temp_removed_everywhere(catalog):
    model = sample_model()
    model["temp"] = {"x": 1}
    model["services"][0]["temp"] = {"y": 2}
    catalog.rules(f'<rule match="{UNITS}"><set path="temp.instanceName"><select path="name"/>'
                  '</set><set path="state.kept"><true/></set><set path="::temp.seen"><true/>'
                  '</set></rule>')
    run = catalog.run(model)
    assert run.status == "success"
    assert "token" not in run.model and "temp" not in run.model
    for service in run.model["services"]:
        assert "temp" not in service
        for unit in service["units"]:
            assert "temp" not in unit and unit["state"] == {"kept": True}


def test_clean_model_with_services_as_dict_and_odd_shapes():
    model = {"token": "t", "temp": {}, "services": {
        "a": {"temp": 1, "units": [{"temp": 2, "id": "u"}, "junk"]}, "b": "junk"}}
    assert clean_model(model) == {"services": {"a": {"units": [{"id": "u"}, "junk"]},
                                               "b": "junk"}}


def test_deleted_environment_shape_runs(catalog):
    catalog.rules('<rule match="$[?(@.deleted)]"><delete-cf-stack/><mute/></rule>')
    log: list = []
    run = catalog.run({"id": "E2", "services": {}, "deleted": True, "token": "t"}, log=log)
    assert run.status == "success"
    assert log == [("delete", "eE2")]
    assert run.model == {"id": "E2", "services": {}, "deleted": True}


# ------------------------------------------------------------ a small 0.2-style deployment

DEPLOY = """<workflow>
  <rule match="$.services[*].units[?(@.state.hostname is None)]" desc="hostnames">
    <set path="state.hostname">
      <generate-hostname>
        <parameter name="pattern"><select path="::name"/>#</parameter>
        <parameter name="service_id"><select path="::id"/></parameter>
      </generate-hostname>
    </set>
  </rule>
  <rule match="$.services[*].units[?(@.state.hostname and not @.temp.instanceName)]"
        desc="instances">
    <update-cf-stack template="Instance" error="exception">
      <parameter name="mappings">
        <map>
          <mappingInstance name="instanceName"><select path="state.hostname"/></mappingInstance>
          <item name="image"><select path="::osImage.name" default="ws-2012-std"/></item>
        </map>
      </parameter>
      <success>
        <set path="temp.instanceName"><select path="name"/></set>
        <report entity="unit"><parameter name="id"><select path="id"/></parameter>
          <parameter name="text">Instance <select path="state.hostname"/> created</parameter>
        </report>
      </success>
      <failure>
        <report entity="unit" level="error">
          <parameter name="id"><select path="id"/></parameter>
          <parameter name="text">Unable to deploy instance <select path="state.hostname"/>:
            <select path="#exception.message"/></parameter>
        </report>
        <stop/>
      </failure>
    </update-cf-stack>
  </rule>
  <rule match="$.services[*].units[?(@.temp.instanceName and not @.state.passwordSet)]"
        desc="passwords">
    <send-command template="SetPassword" error="exception">
      <parameter name="unit"><select path="id"/></parameter>
      <parameter name="service"><select path="::id"/></parameter>
      <parameter name="mappings">
        <map><item name="adminPassword"><select path="::adminPassword"/></item></map>
      </parameter>
      <success><set path="state.passwordSet"><true/></set></success>
      <failure>
        <report entity="unit" level="warning">
          <parameter name="id"><select path="id"/></parameter>
          <parameter name="text">Unable to set password on unit <select path="name"/>:
            <select path="#exception.0.messages.0"/></parameter>
        </report>
        <set path="state.passwordSet">failed</set>
      </failure>
    </send-command>
  </rule>
</workflow>
"""


def _deploy_catalog(catalog):
    catalog.workflow(DEPLOY)
    catalog.heat("Instance", {"Resources": {"$instanceName": {
        "Type": "AWS::EC2::Instance", "Properties": {"ImageId": "$image"}}}})
    catalog.script("Pw.ps1", "function Set-Pw {}")
    catalog.agent("SetPassword", scripts=("Pw.ps1",), commands=[
        {"Name": "Set-LocalUserPassword", "Arguments": {"Password": "$adminPassword"}}])


def test_small_deployment_end_to_end(catalog):
    _deploy_catalog(catalog)
    run = catalog.run()
    assert run.status == "success", run.reports
    assert run.outcome.rounds == 3
    assert set(run.stacks.stacks["eENV1"]["Resources"]) == {"web1", "web2", "db1"}
    passwords = [p.plan["Commands"][0]["Arguments"]["Password"] for p in run.agents.plans]
    assert passwords == ["S3cr3t!Pass", "S3cr3t!Pass", "$adminPassword"]
    assert run.texts() == ["Instance web1 created", "Instance web2 created",
                           "Instance db1 created"]
    assert run.unit("uA1")["state"] == {"hostname": "web1", "passwordSet": True}
    assert "temp" not in run.unit("uA1")
    # the recorded trace never shows the password
    assert "S3cr3t" not in repr(run.trace.rounds)


def test_small_deployment_redeploy_rebuilds_the_stack(catalog):
    _deploy_catalog(catalog)
    first = catalog.run()
    second = catalog.run(first.model)
    assert second.status == "success"
    # temp was wiped: every instance is re-sent to Heat, passwords are not
    assert set(second.stacks.stacks["eENV1"]["Resources"]) == {"web1", "web2", "db1"}
    assert second.agents.plans == []
    assert second.outcome.rounds == 2


def test_small_deployment_heat_failure_stops(catalog):
    _deploy_catalog(catalog)
    run = catalog.run(cloud=SimulatedCloud(failures=[Fault.parse("Instance:db1")]))
    assert run.status == "stopped"
    assert run.agents.plans == []
    # the merged stack failed: every instance of the round reports it, then the stop holds
    errors = [r for r in run.reports if r["level"] == "error"]
    assert [e["id"] for e in errors] == ["uA1", "uA2", "uB1"]
    assert errors[0]["text"].startswith("Unable to deploy instance web1:")
    assert all("simulated failure of template Instance" in e["text"] for e in errors)


def test_small_deployment_command_failure_reports_and_goes_on(catalog):
    _deploy_catalog(catalog)
    run = catalog.run(cloud=SimulatedCloud(failures=[Fault.parse("SetPassword:web2")]))
    assert run.status == "success"
    [warning] = [r for r in run.reports if r["level"] == "warning"]
    assert warning["id"] == "uA2"
    assert warning["text"].split()[:6] == ["Unable", "to", "set", "password", "on", "unit"]
    assert warning["text"].endswith("SimulatedFailure")
    assert run.unit("uA2")["state"]["passwordSet"] == "failed"
    assert run.unit("uA1")["state"]["passwordSet"] is True


def test_the_session_is_the_context_the_dsl_evaluates_in(catalog):
    stacks, agents = SimulatedCloud().executors()
    session = Session(sample_model(), [], catalog.store(), stacks, agents)
    assert isinstance(session, EvaluationContext)
    assert isinstance(session.store, Templates)

