"""Actions: send-command, update-cf-stack, delete-cf-stack; their 0.2 result
and error shapes; template merging and mapping substitution; stop; report."""
from __future__ import annotations

import base64
import datetime

import pytest

from fornace.conductor.executors.cfn import merge
from fornace.conductor.executors.simulator import Fault, SimulatedCloud
from fornace.conductor.templates import substitute
from enginekit import UNITS, RecordingStacks, ScriptedAgents, sample_model, send_command

MASTER = "$.services[*].units[?(@.isMaster)]"
UNIT_A2 = "$.services[0].units[1]"


def store_var(var: str, path: str = "state.got") -> str:
    return f'<set path="{path}"><select path="#{var}"/></set>'


# ------------------------------------------------------------ send-command

def test_send_command_builds_the_plan(catalog):
    catalog.script("Core.ps1", "function Core {}\n")
    catalog.script("Deploy.ps1", "function Deploy {}\n")
    catalog.agent("Deploy", scripts=("Core.ps1", "Deploy.ps1"), reboot=1,
                  commands=[{"Name": "Deploy-App", "Arguments": {"URL": "$repo", "Keep": 3}}])
    catalog.rules(f'<rule match="{MASTER}"><mute/>'
                  + send_command("Deploy", mappings='<map><item name="repo">git://x</item></map>')
                  + '</rule>')
    run = catalog.run()
    assert run.status == "success", run.reports
    [request] = run.agents.plans
    assert (request.service, request.unit, request.template) == ("SvcA", "uA1", "Deploy")
    plan = request.plan
    assert [base64.b64decode(s).decode() for s in plan["Scripts"]] \
        == ["function Core {}\n", "function Deploy {}\n"]
    assert plan["Commands"] == [{"Name": "Deploy-App", "Arguments": {"URL": "git://x", "Keep": 3}}]
    assert plan["RebootOnCompletion"] == 1
    assert isinstance(plan["ID"], str) and plan["ID"]
    assert request.labels == frozenset({"uA1", "web_instance_1"})
    assert request.timeout is None


def test_plan_ids_are_unique(catalog):
    catalog.agent("Tpl")
    catalog.rules(f'<rule match="{UNITS}"><mute/>' + send_command("Tpl") + '</rule>')
    run = catalog.run()
    ids = [r.plan["ID"] for r in run.agents.plans]
    assert len(ids) == 3 and len(set(ids)) == 3


def test_plan_in_sub_folder_and_defaults(catalog):
    catalog.file("templates/agent/win/Setup.template", '{"Scripts": []}')
    catalog.rules(f'<rule match="{MASTER}"><mute/>' + send_command("win/Setup") + '</rule>')
    run = catalog.run()
    assert run.status == "success", run.reports
    plan = run.agents.plans[0].plan
    assert plan["Commands"] == [] and plan["RebootOnCompletion"] == 0


def test_send_command_success_result_is_per_command_entries(catalog):
    catalog.agent("Two", commands=[{"Name": "A", "Arguments": {}}, {"Name": "B", "Arguments": {}}])
    catalog.rules(f'<rule match="{MASTER}"><mute/>'
                  + send_command("Two", result="res", body='<success>'
                                 '<set path="state.first"><select path="#res.0.Result.0"/></set>'
                                 '<set path="state.all"><select path="#res"/></set></success>')
                  + '</rule>')
    run = catalog.run()
    state = run.unit("uA1")["state"]
    assert state["first"] == "ok"
    assert state["all"] == [{"IsException": False, "Result": ["ok"]},
                            {"IsException": False, "Result": ["ok"]}]


def test_send_command_result_value_per_template(catalog):
    catalog.agent("Ask")
    catalog.rules(f'<rule match="{MASTER}"><mute/>'
                  + send_command("Ask", result="r", body='<success><set path="state.ip">'
                                 '<select path="#r.0.Result.0.ip"/></set></success>')
                  + '</rule>')
    run = catalog.run(cloud=SimulatedCloud(command_results={"Ask": {"ip": "10.1.1.1"}}))
    assert run.unit("uA1")["state"]["ip"] == "10.1.1.1"


def test_success_block_runs_at_the_queued_cursor(catalog):
    catalog.agent("Tpl")
    catalog.rules(f'<rule match="{UNITS}"><set path="#mine"><select path="name"/></set>'
                  + send_command("Tpl", body='<success><set path="state.done">'
                                 '<select path="#mine"/></set></success>')
                  + '</rule>')
    run = catalog.run()
    assert run.unit("uA2")["state"] == {"done": "web_instance_2"}
    assert run.unit("uB1")["state"] == {"done": "db_instance_1"}


def test_failure_block_not_run_on_success(catalog):
    catalog.agent("Tpl")
    catalog.rules(f'<rule match="{MASTER}"><mute/>'
                  + send_command("Tpl", error="e", body='<success><set path="state.s"><true/></set>'
                                 '</success><failure><set path="state.f"><true/></set></failure>')
                  + '</rule>')
    assert catalog.run().unit("uA1")["state"] == {"s": True}


@pytest.mark.parametrize("fault", ["Tpl", "Tpl:uA2", "Tpl:web_instance_2"])
def test_send_command_inner_failure(catalog, fault):
    catalog.agent("Tpl")
    catalog.agent("Other")
    catalog.rules(f'<rule match="{UNIT_A2}"><mute/>'
                  + send_command("Tpl", error="err", body='<success><set path="state.s"><true/>'
                                 '</set></success><failure>'
                                 + store_var("err", "state.err")
                                 + '<set path="state.msg"><select path="#err.0.messages.0"/></set>'
                                 '</failure>')
                  + '</rule>')
    run = catalog.run(cloud=SimulatedCloud(failures=[Fault.parse(fault), Fault.parse("X:uA1")]))
    assert run.status == "success", run.reports
    state = run.unit("uA2")["state"]
    assert "s" not in state
    assert state["msg"] == "SimulatedFailure"
    assert state["err"] == [{"type": "inner", "messages": [
        "SimulatedFailure", "simulated failure of Tpl on unit uA2"]}]
    assert run.actions()[0]["outcome"] == "failure"


def test_fault_on_other_unit_does_not_hit(catalog):
    catalog.agent("Tpl")
    catalog.rules(f'<rule match="{UNITS}"><mute/>'
                  + send_command("Tpl", body='<success><set path="state.ok"><true/></set>'
                                 '</success><failure><set path="state.ok"><false/></set></failure>')
                  + '</rule>')
    run = catalog.run(cloud=SimulatedCloud(failures=[Fault.parse("Tpl:uB1")]))
    assert [run.unit(u)["state"]["ok"] for u in ("uA1", "uA2", "uB1")] == [True, True, False]


def test_fault_by_hostname(catalog):
    catalog.agent("Tpl")
    model = sample_model()
    model["services"][1]["units"][0]["state"] = {"hostname": "db7"}
    catalog.rules(f'<rule match="{UNITS}"><mute/>'
                  + send_command("Tpl", error="e", body='<failure><set path="state.failed"><true/>'
                                 '</set></failure>') + '</rule>')
    run = catalog.run(model, cloud=SimulatedCloud(failures=[Fault.parse("Tpl:db7")]))
    assert run.unit("uB1")["state"]["failed"] is True
    assert "state" not in run.unit("uA1")


def test_only_failed_commands_become_inner_errors(catalog):
    catalog.agent("Tpl", commands=[{"Name": "A", "Arguments": {}}, {"Name": "B", "Arguments": {}}])
    reply = {"IsException": False, "Result": [
        {"IsException": False, "Result": ["fine"]},
        {"IsException": True, "Result": ["System.IO.IOException", "disk full"]}]}
    catalog.rules(f'<rule match="{MASTER}"><mute/>'
                  + send_command("Tpl", error="err", body='<failure>' + store_var("err")
                                 + '</failure>') + '</rule>')
    run = catalog.run(agents=ScriptedAgents({"Tpl": reply}))
    assert run.unit("uA1")["state"]["got"] == [
        {"type": "inner", "messages": ["System.IO.IOException", "disk full"]}]


def test_send_command_general_failure(catalog):
    catalog.agent("Tpl")
    reply = {"IsException": True, "Result": ["PlanException", "corrupted plan"]}
    catalog.rules(f'<rule match="{MASTER}"><mute/>'
                  + send_command("Tpl", error="err", body='<failure>' + store_var("err")
                                 + '</failure>') + '</rule>')
    run = catalog.run(agents=ScriptedAgents({"Tpl": reply}))
    assert run.unit("uA1")["state"]["got"] == [
        {"type": "general", "messages": ["PlanException", "corrupted plan"]}]


def test_send_command_malformed_reply_is_general_failure(catalog):
    catalog.agent("Tpl")
    catalog.rules(f'<rule match="{MASTER}"><mute/>'
                  + send_command("Tpl", error="err", body='<failure>' + store_var("err")
                                 + '</failure>') + '</rule>')
    run = catalog.run(agents=ScriptedAgents({"Tpl": "garbage"}))
    [error] = run.unit("uA1")["state"]["got"]
    assert error["type"] == "general"


def test_agent_executor_crash_is_a_general_failure_not_a_crash(catalog):
    catalog.agent("Tpl")
    catalog.rules(f'<rule match="{MASTER}"><mute/>'
                  + send_command("Tpl", error="err", body='<failure>' + store_var("err")
                                 + '</failure>') + '</rule>')
    run = catalog.run(agents=ScriptedAgents({"Tpl": RuntimeError("broker gone")}))
    assert run.status == "success"
    assert run.unit("uA1")["state"]["got"] == [
        {"type": "general", "messages": ["RuntimeError", "broker gone"]}]


def test_send_command_timeout(catalog):
    catalog.agent("Tpl")
    catalog.rules(f'<rule match="{MASTER}"><mute/>'
                  + send_command("Tpl", error="err", extra=' timeout="30"',
                                 body='<failure>' + store_var("err") + '</failure>')
                  + '</rule>')
    run = catalog.run(cloud=SimulatedCloud(timeouts=[Fault.parse("Tpl:uA1")]))
    [error] = run.unit("uA1")["state"]["got"]
    assert error["type"] == "timeout" and error["timeout"] == 30
    assert error["messages"] and "30" in error["messages"][0]
    assert run.agents.plans[0].timeout == 30.0


def test_send_command_timeout_defaults_to_settings(catalog):
    catalog.agent("Tpl")
    catalog.rules(f'<rule match="{MASTER}"><mute/>' + send_command("Tpl", error="e") + '</rule>')
    run = catalog.run(agent_timeout=12.5)
    assert run.agents.plans[0].timeout == 12.5


def test_send_command_bad_timeout_is_an_error(catalog):
    catalog.agent("Tpl")
    catalog.rules(f'<rule match="{MASTER}"><mute/>'
                  + send_command("Tpl", extra=' timeout="soon"') + '</rule>')
    run = catalog.run()
    assert run.status == "error" and "'soon' is not a number" in run.errors[0]


def test_send_command_without_unit_is_an_error(catalog):
    path = catalog.rules('<rule match="$">\n<send-command template="Tpl" service="s"/></rule>')
    run = catalog.run()
    assert run.status == "error"
    assert f"{path}:3" in run.errors[0] and "service and unit" in run.errors[0]


def test_failure_block_can_queue_a_retry_next_round(catalog):
    catalog.agent("Tpl")
    catalog.agent("Fallback")
    catalog.rules(f'<rule match="{MASTER}"><mute/>'
                  + send_command("Tpl", error="e", body='<failure>'
                                 + send_command("Fallback", body='<success><set path="state.fb">'
                                                '<true/></set></success>')
                                 + '</failure>') + '</rule>')
    run = catalog.run(cloud=SimulatedCloud(failures=[Fault.parse("Tpl")]))
    assert [p.template for p in run.agents.plans] == ["Tpl", "Fallback"]
    assert run.unit("uA1")["state"]["fb"] is True
    assert run.outcome.rounds == 3


# ------------------------------------------------------------ update-cf-stack

INSTANCE = {"Resources": {"$instanceName": {"Type": "AWS::EC2::Instance",
                                           "Properties": {"ImageId": "$image", "Tags": ["t1"]}}},
            "Outputs": {"$instanceName-ip": {"Value": "x"}}}


def update_stack(template="Instance", mappings="", arguments="", body="", result=None,
                 error=None) -> str:
    attrs = f' template="{template}"'
    if result:
        attrs += f' result="{result}"'
    if error:
        attrs += f' error="{error}"'
    params = ""
    if mappings:
        params += f'<parameter name="mappings">{mappings}</parameter>'
    if arguments:
        params += f'<parameter name="arguments">{arguments}</parameter>'
    return f'<update-cf-stack{attrs}>{params}{body}</update-cf-stack>'


NAME_MAP = ('<map><item name="instanceName"><select path="name"/></item>'
            '<item name="image"><select path="::osImage.name"/></item></map>')


def test_update_stack_substitutes_and_names_stack(catalog):
    catalog.heat("Instance", INSTANCE)
    catalog.rules(f'<rule match="{MASTER}"><mute/>' + update_stack(mappings=NAME_MAP) + '</rule>')
    run = catalog.run()
    assert run.status == "success", run.reports
    assert run.stacks.stacks == {"eENV1": {
        "Resources": {"web_instance_1": {"Type": "AWS::EC2::Instance",
                                         "Properties": {"ImageId": "ws-2012-std",
                                                        "Tags": ["t1"]}}},
        "Outputs": {"$instanceName-ip": {"Value": "x"}}}}


def test_update_stack_result_is_outputs_dict(catalog):
    catalog.heat("Instance", INSTANCE)
    catalog.rules(f'<rule match="{MASTER}"><mute/>'
                  + update_stack(mappings=NAME_MAP, result="out", body='<success>'
                                 + store_var("out")
                                 + '<set path="state.ip"><select path="#out.lbIp"/></set>'
                                 '</success>') + '</rule>')
    run = catalog.run(cloud=SimulatedCloud(stack_outputs={"lbIp": "1.2.3.4", "n": 2}))
    assert run.unit("uA1")["state"] == {"got": {"lbIp": "1.2.3.4", "n": 2}, "ip": "1.2.3.4"}


def test_update_stack_failure_shape(catalog):
    catalog.heat("Instance", INSTANCE)
    catalog.rules(f'<rule match="{MASTER}"><mute/>'
                  + update_stack(mappings=NAME_MAP, error="err", body='<success><set path="s">'
                                 '<true/></set></success><failure>' + store_var("err")
                                 + '<set path="state.why"><select path="#err.message"/></set>'
                                 '</failure>') + '</rule>')
    run = catalog.run(cloud=SimulatedCloud(failures=[Fault.parse("Instance")]))
    state = run.unit("uA1")["state"]
    assert set(state["got"]) == {"message", "strerror", "timestamp"}
    assert state["got"]["strerror"] == "simulated failure"
    assert "Instance" in state["why"]
    datetime.datetime.fromisoformat(state["got"]["timestamp"])
    assert "s" not in run.unit("uA1")
    assert "eENV1" not in run.stacks.stacks


def test_stack_failure_fails_every_update_of_the_round(catalog):
    catalog.heat("Instance", INSTANCE)
    catalog.rules(f'<rule match="{UNITS}"><mute/>'
                  + update_stack(mappings=NAME_MAP, body='<success><set path="state.ok"><true/>'
                                 '</set></success><failure><set path="state.ok"><false/></set>'
                                 '</failure>') + '</rule>')
    # the fault names one unit (by a mapping value), the single stack update fails
    run = catalog.run(cloud=SimulatedCloud(failures=[Fault.parse("Instance:web_instance_2")]))
    assert [run.unit(u)["state"]["ok"] for u in ("uA1", "uA2", "uB1")] == [False] * 3
    assert len(run.stacks.requests) == 1


def test_stack_timeout_is_a_failure(catalog):
    catalog.heat("Instance", INSTANCE)
    catalog.rules(f'<rule match="{MASTER}"><mute/>'
                  + update_stack(mappings=NAME_MAP, error="err", body='<failure>'
                                 + store_var("err") + '</failure>') + '</rule>')
    run = catalog.run(cloud=SimulatedCloud(timeouts=[Fault.parse("Instance")]))
    assert run.unit("uA1")["state"]["got"]["strerror"] == "simulated timeout"


def test_stack_executor_crash_is_a_failure_not_a_crash(catalog):
    class Broken(RecordingStacks):
        def apply(self, request):
            raise ConnectionError("heat unreachable")

    catalog.heat("Instance", INSTANCE)
    catalog.rules(f'<rule match="{MASTER}"><mute/>'
                  + update_stack(mappings=NAME_MAP, error="err", body='<failure>'
                                 + store_var("err") + '</failure>') + '</rule>')
    run = catalog.run(stacks=Broken(SimulatedCloud()))
    assert run.status == "success"
    err = run.unit("uA1")["state"]["got"]
    assert "ConnectionError: heat unreachable" in err["message"]


def test_updates_of_a_round_merge_into_one_template(catalog):
    catalog.heat("Instance", INSTANCE)
    catalog.heat("Group", {"Resources": {"SG": {"Type": "AWS::EC2::SecurityGroup",
                                                "Properties": {"Rules": [{"port": 80}]}}}})
    catalog.heat("Group2", {"Resources": {"SG": {"Properties": {
        "Rules": [{"port": 80}, {"port": 443}], "Desc": "d"}}}})
    catalog.rules(f'<rule match="{UNITS}"><mute/>' + update_stack(mappings=NAME_MAP) + '</rule>\n'
                  '<rule match="$.services[0]"><mute/>' + update_stack("Group") + '</rule>\n'
                  '<rule match="$.services[1]"><mute/>' + update_stack("Group2") + '</rule>')
    run = catalog.run()
    assert len(run.stacks.requests) == 1
    request = run.stacks.requests[0]
    assert [s.template for s in request.sources] == ["Instance"] * 3 + ["Group", "Group2"]
    template = run.stacks.stacks["eENV1"]
    assert set(template["Resources"]) == {"web_instance_1", "web_instance_2", "db_instance_1",
                                          "SG"}
    assert template["Resources"]["SG"] == {"Type": "AWS::EC2::SecurityGroup", "Properties": {
        "Rules": [{"port": 80}, {"port": 443}], "Desc": "d"}}
    assert template["Resources"]["db_instance_1"]["Properties"]["ImageId"] == "$image"


def test_heat_arguments_merge_one_level(catalog):
    catalog.heat("A", {"Resources": {"a": {}}})
    catalog.heat("B", {"Resources": {"b": {}}})
    catalog.rules('<rule match="$.services[0]"><mute/>'
                  + update_stack("A", arguments='<map><item name="KeyName">k1</item>'
                                 '<item name="Opts"><map><item name="x">1</item></map></item>'
                                 '</map>') + '</rule>\n'
                  '<rule match="$.services[1]"><mute/>'
                  + update_stack("B", arguments='<map><item name="Other">o</item>'
                                 '<item name="Opts"><map><item name="y">2</item></map></item>'
                                 '</map>') + '</rule>')
    run = catalog.run()
    assert run.stacks.requests[0].parameters == {"KeyName": "k1", "Other": "o",
                                                 "Opts": {"y": "2"}}


def test_each_round_updates_the_stack_again(catalog):
    catalog.heat("A", {"Resources": {"a": {"v": "$v"}}})
    catalog.rules('<rule id="r" match="$.services[?(@.state.step is None)]">'
        + update_stack("A", mappings='<map><item name="v">one</item></map>',
                       body='<success><set path="state.step">1</set></success>') + '</rule>\n'
        '<rule id="s" match="$.services[?(@.state.step == \'1\')]">'
        + update_stack("A", mappings='<map><item name="v">two</item></map>',
                       body='<success><set path="state.step">2</set></success>') + '</rule>')
    run = catalog.run()
    assert len(run.stacks.requests) == 2
    assert run.stacks.stacks["eENV1"] == {"Resources": {"a": {"v": "two"}}}


def test_mappings_do_not_alias_the_model(catalog):
    catalog.heat("A", {"Resources": {"x": "$obj"}})
    catalog.heat("B", {"Resources": {"x": {"extra": 1}}})
    catalog.rules('<rule match="$.services[0]"><mute/>'
                  + update_stack("A", mappings='<map><item name="obj"><select path="osImage"/>'
                                 '</item></map>') + update_stack("B") + '</rule>')
    run = catalog.run()
    assert run.stacks.stacks["eENV1"]["Resources"]["x"] == {"name": "ws-2012-std", "extra": 1}
    assert run.model["services"][0]["osImage"] == {"name": "ws-2012-std"}


def test_mappings_must_be_a_map(catalog):
    path = catalog.rules('<rule match="$">\n<update-cf-stack template="A">'
                         '<parameter name="mappings">text</parameter></update-cf-stack></rule>')
    run = catalog.run()
    assert run.status == "error"
    assert f"{path}:3" in run.errors[0] and "mappings must be a <map>" in run.errors[0]


def test_delete_stack(catalog):
    catalog.heat("A", {"Resources": {"a": {}}})
    catalog.rules('<rule id="mk" match="$[?(@.state.made is None)]">'
                  + update_stack("A", body='<success><set path="state.made"><true/></set>'
                                 '</success>') + '</rule>\n'
                  '<rule id="rm" match="$[?(@.state.made and @.state.gone is None)]">'
                  '<delete-cf-stack><success><set path="state.gone"><true/></set></success>'
                  '</delete-cf-stack></rule>')
    log: list = []
    run = catalog.run(log=log)
    assert run.status == "success", run.reports
    assert log == [("heat", ["A"]), ("delete", "eENV1")]
    assert run.stacks.stacks == {}
    assert run.model["state"] == {"made": True, "gone": True}


def test_delete_stack_failure(catalog):
    class NoDelete(RecordingStacks):
        def delete(self, stack_name):
            from fornace.conductor.executors.base import StackFailure
            raise StackFailure("DELETE_FAILED", "resource busy")

    catalog.rules('<rule match="$"><delete-cf-stack error="e"><failure>'
                  '<set path="state.err"><select path="#e"/></set></failure>'
                  '</delete-cf-stack></rule>')
    run = catalog.run(stacks=NoDelete(SimulatedCloud()))
    assert run.model["state"]["err"]["message"] == "DELETE_FAILED"
    assert run.model["state"]["err"]["strerror"] == "resource busy"


# ------------------------------------------------------------ substitution

def test_substitution_exact_strings_and_keys_only(catalog):
    catalog.agent("Tpl", commands=[{"Name": "Cmd", "Arguments": {
        "a": "$x", "b": "prefix $x", "c": "$missing", "$key": "k", "d": "$nul",
        "e": ["$x", {"f": "$x"}], "g": "$$x", "$nul": "stays"}}])
    catalog.rules(f'<rule match="{MASTER}"><mute/>'
                  + send_command("Tpl", mappings='<map><item name="x"><int>5</int></item>'
                                 '<item name="key">K</item><item name="nul"><null/></item></map>')
                  + '</rule>')
    run = catalog.run()
    args = run.agents.plans[0].plan["Commands"][0]["Arguments"]
    assert args == {"a": 5, "b": "prefix $x", "c": "$missing", "K": "k", "d": "$nul",
                    "e": [5, {"f": 5}], "g": "$$x", "$nul": "stays"}


def test_substitute_and_merge_functions():
    assert substitute({"$k": ["$v", 1]}, {"k": 2, "v": {"a": 1}}) == {"2": [{"a": 1}, 1]}
    assert substitute("$v", {"v": False}) is False
    assert merge({"a": {"b": 1, "l": [1, 2]}}, {"a": {"c": 2, "l": [2, 3]}}) \
        == {"a": {"b": 1, "c": 2, "l": [1, 2, 3]}}
    assert merge({"a": [1]}, {"a": {"x": 1}}) == {"a": {"x": 1}}
    assert merge({"a": "s"}, {"a": "t"}) == {"a": "t"}


# ------------------------------------------------------------ function (deferred mappings)

def test_function_mapping_resolved_when_the_action_runs(catalog):
    catalog.heat("Instance", INSTANCE)
    catalog.agent("Tpl", commands=[{"Name": "Cmd", "Arguments": {"ip": "$ip", "now": "$now"}}])
    catalog.rules(f'<rule match="{MASTER}"><mute/>'
                  + update_stack(mappings=NAME_MAP, result="o", body='<success>'
                                 '<set path="state.ip"><select path="#o.ip"/></set></success>')
                  + send_command("Tpl", mappings='<map>'
                                 '<item name="ip"><function><select path="state.ip"/></function>'
                                 '</item><item name="now"><select path="state.ip"/></item></map>')
                  + '</rule>')
    run = catalog.run(cloud=SimulatedCloud(stack_outputs={"ip": "10.0.0.9"}))
    assert run.status == "success", run.reports
    # Heat ran first; the deferred mapping saw its result, the plain one did not
    args = run.agents.plans[0].plan["Commands"][0]["Arguments"]
    assert args == {"ip": "10.0.0.9", "now": "$now"}


# ------------------------------------------------------------ ordering

def test_heat_actions_run_before_agent_commands(catalog):
    catalog.heat("A", {"Resources": {"a": {}}})
    catalog.agent("Tpl")
    catalog.rules(f'<rule match="{MASTER}"><mute/>' + send_command("Tpl") + '</rule>\n'
                  '<rule match="$.services[1]"><mute/><delete-cf-stack/></rule>\n'
                  '<rule match="$.services[0]"><mute/>' + update_stack("A") + '</rule>')
    log: list = []
    agents = ScriptedAgents({"Tpl": {"IsException": False, "Result": [
        {"IsException": False, "Result": [1]}]}}, log)
    run = catalog.run(log=log, agents=agents)
    assert run.status == "success", run.reports
    assert log == [("heat", ["A"]), ("delete", "eENV1"), ("agent", "Tpl")]


# ------------------------------------------------------------ stop

def test_stop_in_rule_ends_deployment_without_running_actions(catalog):
    catalog.agent("Tpl")
    catalog.rules(f'<rule match="{UNITS}"><mute/>' + send_command("Tpl") + '</rule>\n'
                  '<rule id="halt" match="$"><stop/></rule>\n'
                  '<rule id="after" match="$"><report text="after"/></rule>', "a.xml")
    catalog.rules('<rule id="other" match="$"><report text="other file"/></rule>', "b.xml")
    run = catalog.run()
    assert run.status == "stopped"
    assert run.agents.plans == []
    assert [a["outcome"] for a in run.actions()] == ["cancelled"] * 3
    assert run.texts() == []  # nothing after the stop ran
    assert "temp" not in run.model  # _stop_requested lives in temp


def test_stop_in_callback_cancels_later_actions(catalog):
    catalog.heat("A", {"Resources": {"a": {}}})
    catalog.agent("Tpl")
    catalog.rules(f'<rule match="{MASTER}"><mute/>' + send_command("Tpl") + '</rule>\n'
                  '<rule match="$.services[0]"><mute/>'
                  + update_stack("A", body='<success><stop/></success>') + '</rule>')
    run = catalog.run()
    assert run.status == "stopped"
    assert run.agents.plans == []
    outcomes = {a["kind"]: a["outcome"] for a in run.actions()}
    assert outcomes == {"send-command": "cancelled", "update-cf-stack": "success"}
    assert run.outcome.rounds == 1


def test_stop_in_failure_of_command_still_records_the_commands_that_ran(catalog):
    # the other units' commands ran in the same round: their results are kept
    catalog.agent("Tpl")
    catalog.rules(f'<rule match="{UNITS}"><mute/>'
                  + send_command("Tpl", error="e", body='<success><set path="state.ok"><true/>'
                                 '</set></success><failure><stop/></failure>') + '</rule>')
    run = catalog.run(cloud=SimulatedCloud(failures=[Fault.parse("Tpl:uA1")]))
    assert run.status == "stopped"
    assert run.unit("uA2")["state"] == {"ok": True} and run.unit("uB1")["state"] == {"ok": True}
    assert [a["outcome"] for a in run.actions()] == ["failure", "success", "success"]
    assert run.outcome.rounds == 1


def test_stop_in_a_heat_callback_cancels_the_commands_of_the_round(catalog):
    catalog.agent("Tpl")
    catalog.heat("Stack", {"Resources": {"vm": {"Type": "OS::Nova::Server"}}})
    catalog.rules(f'<rule match="{MASTER}"><mute/><update-cf-stack template="Stack">'
                  '<failure><stop/></failure></update-cf-stack>'
                  + send_command("Tpl") + '</rule>')
    run = catalog.run(cloud=SimulatedCloud(failures=[Fault.parse("Stack")]))
    assert run.status == "stopped"
    assert [a["outcome"] for a in run.actions()] == ["failure", "cancelled"]


# ------------------------------------------------------------ report

def test_report_body_and_reporter(catalog):
    # text comes first: what follows a <parameter> is not content (0.2)
    catalog.rules(f'<rule match="{MASTER}"><report entity="unit" level="warning">'
                  'Unit <select path="name"/> is slow'
                  '<parameter name="id"><select path="id"/></parameter>'
                  '<parameter name="details"><map><item name="k">v</item></map></parameter>'
                  '</report></rule>')
    run = catalog.run()
    expected = {"id": "uA1", "entity": "unit", "text": "Unit web_instance_1 is slow",
                "details": {"k": "v"}, "level": "warning", "environment_id": "ENV1"}
    assert run.reports == [expected]
    assert run.reported == [expected]
    assert run.trace.rounds[0]["reports"] == [expected]


def test_report_text_attribute_and_defaults(catalog):
    catalog.rules('<rule match="$"><report text="hello"/></rule>')
    [report] = catalog.run().reports
    assert report == {"id": None, "entity": None, "text": "hello", "details": None,
                      "level": "info", "environment_id": "ENV1"}


def test_report_non_string_text_is_str(catalog):
    catalog.rules('<rule match="$"><report><int>3</int></report></rule>')
    assert catalog.run().texts() == ["3"]


def test_report_masks_secrets(catalog):
    model = sample_model()
    model["services"][1]["saPassword"] = "Sql!Secret9"
    model["services"][0]["units"][0]["recoveryPassword"] = "Recover#42"
    catalog.rules(f'<rule match="{MASTER}"><report entity="unit">'
                  'Password is <select path="::adminPassword"/>, sa '
                  '<select path="/services.1.saPassword"/>, token '
                  '<select path="/token"/>'
                  '<parameter name="details"><map><item name="adminPassword">'
                  '<select path="::adminPassword"/></item><item name="note">'
                  'pw=<select path="recoveryPassword"/></item></map></parameter>'
                  '</report></rule>')
    run = catalog.run(model)
    [report] = run.reports
    assert report["text"] == "Password is ***, sa ***, token ***"
    assert report["details"] == {"adminPassword": "***", "note": "pw=***"}
    assert "S3cr3t" not in repr(run.trace.rounds)
    # the model itself keeps the passwords
    assert run.model["services"][0]["adminPassword"] == "S3cr3t!Pass"


def test_report_masks_secret_set_in_trace(catalog):
    catalog.rules(f'<rule match="{MASTER}"><set path="state.adminPassword">'
                  '<select path="::adminPassword"/></set></rule>')
    run = catalog.run()
    assert run.trace.rounds[0]["changes"][0]["value"] == "***"
    assert run.unit("uA1")["state"]["adminPassword"] == "S3cr3t!Pass"


def test_report_bad_level_is_an_error(catalog):
    catalog.rules('<rule match="$"><report level="fatal" text="x"/></rule>')
    run = catalog.run()
    assert run.status == "error" and "'fatal'" in run.errors[0]
