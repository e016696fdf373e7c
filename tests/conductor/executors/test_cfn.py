"""Removing resources from a stack template (``cfn.remove_resources``), and
the simulated executor that carries it out."""
from __future__ import annotations

import copy

import pytest

from fornace.conductor.executors.base import StackFailure, StackRequest
from fornace.conductor.executors.cfn import references, remove_resources, resource_references
from fornace.conductor.executors.simulator import SimulatedCloud


def instance(**extra) -> dict:
    return {"Type": "AWS::EC2::Instance", "Properties": {"ImageId": "img"}, **extra}


CFN = {
    "AWSTemplateFormatVersion": "2010-09-09",
    "Parameters": {"KeyName": {"Type": "String"}},
    "Resources": {"web1": instance(), "web2": instance(),
                  "lb": {"Type": "AWS::ElasticLoadBalancing::LoadBalancer",
                         "Properties": {"Port": 80}}},
    "Outputs": {"web1Ip": {"Value": {"Fn::GetAtt": ["web1", "PrivateIp"]}},
                "web2Ip": {"Value": {"Fn::GetAtt": ["web2", "PrivateIp"]}},
                "web2Id": {"Value": {"Ref": "web2"}},
                "both": {"Value": {"Fn::Join": [",", [{"Ref": "web1"}, {"Ref": "web2"}]]}},
                "key": {"Value": {"Ref": "KeyName"}},
                "lbPort": {"Value": "80"}},
}


# ------------------------------------------------------------------ resources and outputs

def test_removes_the_resources_and_the_outputs_that_use_them():
    original = copy.deepcopy(CFN)
    removal = remove_resources(CFN, ["web2"])
    assert removal.resources == ("web2",)
    assert removal.outputs == ("web2Ip", "web2Id", "both")
    assert set(removal.template["Resources"]) == {"web1", "lb"}
    assert set(removal.template["Outputs"]) == {"web1Ip", "key", "lbPort"}
    assert removal.template["Parameters"] == CFN["Parameters"]
    assert removal.changed and not removal.empty
    assert CFN == original   # the input is left alone


def test_several_names_in_template_order_and_unknown_ones_ignored():
    removal = remove_resources(CFN, ["nope", "web2", "web1"])
    assert removal.resources == ("web1", "web2")
    assert set(removal.template["Resources"]) == {"lb"}
    assert set(removal.template["Outputs"]) == {"key", "lbPort"}


def test_nothing_to_remove_is_no_change():
    removal = remove_resources(CFN, ["nope"])
    assert not removal.changed and not removal.empty
    assert removal.resources == () and removal.outputs == ()
    assert removal.template == CFN and removal.template is not CFN
    assert not remove_resources({}, ["web1"]).changed
    assert not remove_resources({"Resources": None}, ["web1"]).changed


def test_removing_every_resource_leaves_an_empty_stack():
    removal = remove_resources(CFN, ["web1", "web2", "lb"])
    assert removal.empty
    assert removal.template["Resources"] == {}
    assert set(removal.template["Outputs"]) == {"key", "lbPort"}
    # a stack that had no resources to begin with is not "emptied" by a no-op
    assert not remove_resources({"Resources": {}}, ["x"]).empty


def test_hot_templates_use_their_own_spelling():
    hot = {"heat_template_version": "2015-04-30",
           "resources": {"a": {"type": "OS::Heat::RandomString"},
                         "b": {"type": "OS::Heat::Value",
                               "properties": {"value": "x"}}},
           "outputs": {"aValue": {"value": {"get_attr": ["a", "value"]}},
                       "aId": {"value": {"get_resource": "a"}},
                       "b": {"value": {"get_attr": ["b", "value"]}}}}
    removal = remove_resources(hot, ["a"])
    assert set(removal.template["resources"]) == {"b"}
    assert set(removal.template["outputs"]) == {"b"}
    assert removal.outputs == ("aValue", "aId")


# ------------------------------------------------------------------ references

@pytest.mark.parametrize("body, kind", [
    ({"Type": "T", "Properties": {"Target": {"Ref": "web2"}}}, "Ref"),
    ({"Type": "T", "Properties": {"Ip": {"Fn::GetAtt": ["web2", "PrivateIp"]}}}, "GetAtt"),
    ({"Type": "T", "Properties": {"Ip": {"Fn::GetAtt": "web2.PrivateIp"}}}, "GetAtt short"),
    ({"type": "T", "properties": {"server": {"get_resource": "web2"}}}, "get_resource"),
    ({"type": "T", "properties": {"ip": {"str_replace": {
        "template": "http://$ip/", "params": {"$ip": {"get_attr": ["web2", "first_address"]}}}}}},
     "nested get_attr"),
    ({"Type": "T", "DependsOn": "web2"}, "DependsOn"),
    ({"Type": "T", "DependsOn": ["web1", "web2"]}, "DependsOn list"),
    ({"type": "T", "depends_on": ["web2"]}, "depends_on"),
    ({"Type": "T", "Metadata": {"peers": [{"Ref": "web2"}]}}, "Metadata"),
])
def test_a_remaining_resource_referring_to_a_removed_one_is_an_error(body, kind):
    template = copy.deepcopy(CFN)
    template["Resources"]["user"] = body
    with pytest.raises(StackFailure, match="^stack e42: ") as caught:
        remove_resources(template, ["web2"], "e42")
    message = caught.value.message
    assert "'user'" in message and "'web2'" in message, kind
    assert message.startswith("stack e42:")
    assert caught.value.reason == "removed resource still referenced"


def test_every_conflict_is_named():
    template = copy.deepcopy(CFN)
    template["Resources"]["lb"]["Properties"]["Instances"] = [{"Ref": "web1"}, {"Ref": "web2"}]
    with pytest.raises(StackFailure, match="resource 'lb' refers to 'web1'") as caught:
        remove_resources(template, ["web1", "web2"])
    assert "resource 'lb' refers to 'web1'" in caught.value.message
    assert "resource 'lb' refers to 'web2'" in caught.value.message


def test_references_among_removed_resources_are_fine():
    template = copy.deepcopy(CFN)
    template["Resources"]["web2"]["DependsOn"] = "web1"
    template["Resources"]["web2"]["Properties"]["Peer"] = {"Ref": "web1"}
    removal = remove_resources(template, ["web1", "web2"])
    assert set(removal.template["Resources"]) == {"lb"}


def test_a_property_named_depends_on_is_not_a_dependency():
    body = {"Type": "T", "Properties": {"DependsOn": "web2"}}
    assert resource_references(body) == set()
    assert resource_references({"Type": "T", "DependsOn": "web2"}) == {"web2"}


def test_references_walks_every_intrinsic():
    value = {"Fn::Join": ["", [{"Ref": "a"}, {"Fn::GetAtt": ["b", "Ip"]},
                               {"get_attr": ["c", "x", 0]}, {"get_resource": "d"},
                               {"Fn::GetAtt": "e.Ip"}, {"Ref": 3}, "plain"]]}
    assert references(value) == {"a", "b", "c", "d", "e"}
    assert references("text") == set() and references(None) == set()


# ------------------------------------------------------------------ the simulator

def simulated(outputs: dict | None = None):
    stacks, _ = SimulatedCloud(stack_outputs=outputs or {}).executors()
    return stacks


def test_simulated_remove_keeps_the_rest_and_answers_declared_outputs():
    stacks = simulated({"web1Ip": "10.0.0.1", "web2Ip": "10.0.0.2", "extra": 1})
    stacks.apply(StackRequest("e1", copy.deepcopy(CFN), {}))
    assert stacks.remove("e1", ["web2", "ghost"]) == {"web1Ip": "10.0.0.1"}
    assert set(stacks.stacks["e1"]["Resources"]) == {"web1", "lb"}
    assert "web2Ip" not in stacks.stacks["e1"]["Outputs"]
    assert stacks.removals == [("e1", ["web2", "ghost"])]


def test_simulated_remove_of_the_last_resources_deletes_the_stack():
    stacks = simulated()
    stacks.apply(StackRequest("e1", {"Resources": {"a": instance()}}, {}))
    assert stacks.remove("e1", ["a"]) == {}
    assert "e1" not in stacks.stacks
    assert stacks.remove("e1", ["a"]) == {}    # absent stack
    assert stacks.removals == [("e1", ["a"]), ("e1", ["a"])]


def test_simulated_remove_refusing_leaves_the_stack():
    stacks = simulated()
    template = {"Resources": {"a": instance(), "b": {"Type": "T", "DependsOn": "a"}}}
    stacks.apply(StackRequest("e1", copy.deepcopy(template), {}))
    with pytest.raises(StackFailure, match="'b' refers to 'a'"):
        stacks.remove("e1", ["a"])
    assert stacks.stacks["e1"] == template
