"""The intrinsic functions the local cloud evaluates: instances, user data, outputs."""
from __future__ import annotations

from fornace.conductor.executors.cfnfunctions import (evaluate_outputs, instance_resources,
                                                      instance_user_data)


def test_outputs_are_evaluated_minimally():
    template = {"Parameters": {"port": {"Type": "String", "Default": "80"}},
                "Outputs": {"ip": {"Value": {"Fn::GetAtt": ["vm", "PrivateIp"]}},
                            "pub": {"Value": {"Fn::GetAtt": ["vm", "PublicIp"]}},
                            "ref": {"Value": {"Ref": "vm"}},
                            "param": {"Value": {"Ref": "port"}},
                            "literal": {"Value": "text"},
                            "other": {"Value": {"Fn::GetAtt": ["vm", "AvailabilityZone"]}},
                            "unknown": {"Value": {"Fn::GetAtt": ["lb", "PrivateIp"]}},
                            "join": {"Value": {"Fn::Join": ["", ["a", "b"]]}}}}
    assert evaluate_outputs(template, {"vm": "127.0.0.9"}, {"port": "8080"}) == {
        "ip": "127.0.0.9", "pub": "127.0.0.9", "ref": "vm", "param": "8080",
        "literal": "text", "other": None, "unknown": None, "join": None}


def test_instances_are_the_server_resources_in_either_spelling():
    template = {"Resources": {"vm": {"Type": "AWS::EC2::Instance"},
                              "nova": {"Type": "OS::Nova::Server"},
                              "lb": {"Type": "AWS::ElasticLoadBalancing::LoadBalancer"},
                              "bad": "not a resource"}}
    assert sorted(instance_resources(template)) == ["nova", "vm"]
    hot = {"resources": {"vm": {"type": "OS::Nova::Server"}}}
    assert list(instance_resources(hot)) == ["vm"]
    assert instance_resources({"Resources": []}) == {}


def test_user_data_is_read_through_base64_and_join_of_strings():
    joined = {"Fn::Base64": {"Fn::Join": ["\n", ["#!/bin/sh", "echo hi"]]}}
    assert instance_user_data({"Properties": {"UserData": joined}}) == "#!/bin/sh\necho hi"
    assert instance_user_data({"properties": {"user_data": "plain"}}) == "plain"
    # a value only a real cloud could compute: no user data the local cloud can run
    computed = {"Fn::Join": ["", ["a", {"Ref": "x"}]]}
    assert instance_user_data({"Properties": {"UserData": computed}}) is None
    assert instance_user_data({"Properties": {}}) is None
