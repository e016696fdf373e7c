"""HeatStacks against a real Heat engine (``/work/shared/heat/heat-up``).

Run with ``FORNACE_HEAT_URL=http://127.0.0.1:8004/v1/admin``; without it the
Heat tests skip (fail under FORNACE_REQUIRE_SERVICES=1).  Only resources Heat
handles alone are used: OS::Heat::None/RandomString/Value/TestResource, and
AWS::EC2::Instance remapped with a resource registry (to OS::Heat::None, or
to a provider template passed in ``files`` that gives it a PrivateIp).
"""
from __future__ import annotations

import datetime
import json
import logging
import uuid

import pytest
from oslo_config import cfg

from fornace.conductor import config
from fornace.conductor.executors.base import StackFailure, StackRequest
from fornace.conductor.executors.heat import HeatStacks, load_environment
from services import heat_url, import_or_require

heatclient = import_or_require("heatclient.client")
heat_exc = import_or_require("heatclient.exc")

INSTANCE_TO_NONE = {"AWS::EC2::Instance": "OS::Heat::None",
                    "AWS::ElasticLoadBalancing::LoadBalancer": "OS::Heat::None"}

# A provider template standing in for AWS::EC2::Instance: it accepts the
# properties the 0.2 templates give and outputs every attribute of the type.
INSTANCE_PROVIDER = """
heat_template_version: 2015-04-30
parameters:
  ImageId: {type: string, default: ""}
  InstanceType: {type: string, default: ""}
  KeyName: {type: string, default: ""}
  UserData: {type: string, default: ""}
resources:
  octet:
    type: OS::Heat::RandomString
    properties: {length: 2, character_classes: [{class: digits, min: 2}]}
outputs:
  PrivateIp: {value: {list_join: ["", ["10.0.0.", {get_attr: [octet, value]}]]}}
  PublicIp: {value: {list_join: ["", ["172.16.0.", {get_attr: [octet, value]}]]}}
  PublicDnsName: {value: public.example}
  PrivateDnsName: {value: private.example}
  AvailabilityZone: {value: nova}
"""
PROVIDER_FILE = "fornace-instance.yaml"


@pytest.fixture
def client():
    return heatclient.Client("1", endpoint=heat_url(), token="fornace-test-token")


@pytest.fixture
def stack_names(client):
    """Unique stack names; every stack made is deleted afterwards."""
    made: list[str] = []

    def new() -> str:
        name = f"ft-{uuid.uuid4().hex[:10]}"
        made.append(name)
        return name

    yield new
    cleaner = HeatStacks(client, poll_start=0.2, poll_max=1.0, timeout=120)
    for name in made:
        try:
            cleaner.delete(name)
        except StackFailure:
            pass


def heat(client, **kwargs) -> HeatStacks:
    kwargs.setdefault("poll_start", 0.1)
    kwargs.setdefault("poll_max", 1.0)
    kwargs.setdefault("timeout", 120.0)
    return HeatStacks(client, **kwargs)


def request(name: str, resources: dict, outputs: dict | None = None,
            parameters: dict | None = None, **extra) -> StackRequest:
    template = {"Resources": resources, **extra}
    if outputs is not None:
        template["Outputs"] = outputs
    return StackRequest(name, template, parameters or {})


RANDOM_A = {"a": {"Type": "OS::Heat::RandomString", "Properties": {"length": 12}}}
OUT_A = {"aValue": {"Value": {"Fn::GetAtt": ["a", "value"]}}}


# ------------------------------------------------------------ create / update

def test_create_then_update_merges_into_the_current_template(client, stack_names):
    name = stack_names()
    stacks = heat(client)
    first = stacks.apply(request(name, RANDOM_A, OUT_A))
    assert set(first) == {"aValue"} and len(first["aValue"]) == 12
    assert client.stacks.get(name).stack_status == "CREATE_COMPLETE"

    second = stacks.apply(request(
        name, {"b": {"Type": "OS::Heat::Value", "Properties": {"value": {"Ref": "p"}}}},
        {"bValue": {"Value": {"Fn::GetAtt": ["b", "value"]}}},
        parameters={"p": "hello"}, Parameters={"p": {"Type": "String"}}))
    # the first round's resource and output are kept, unchanged (same random value)
    assert second == {"aValue": first["aValue"], "bValue": "hello"}
    live = client.stacks.template(name)
    assert set(live["Resources"]) == {"a", "b"}
    assert set(live["Outputs"]) == {"aValue", "bValue"}
    assert client.stacks.get(name).stack_status == "UPDATE_COMPLETE"


def test_parameters_reach_the_stack_and_outputs_are_returned(client, stack_names):
    name = stack_names()
    result = heat(client).apply(request(
        name, {"v": {"Type": "OS::Heat::Value", "Properties": {"value": {"Ref": "Greeting"}}}},
        {"greeting": {"Value": {"Fn::GetAtt": ["v", "value"]}},
         "number": {"Value": "42"}},
        parameters={"Greeting": "hi there"},
        Parameters={"Greeting": {"Type": "String"}}))
    assert result == {"greeting": "hi there", "number": "42"}


def test_same_template_again_is_an_update_that_keeps_everything(client, stack_names):
    name = stack_names()
    stacks = heat(client)
    first = stacks.apply(request(name, RANDOM_A, OUT_A))
    assert stacks.apply(request(name, RANDOM_A, OUT_A)) == first
    assert client.stacks.get(name).stack_status == "UPDATE_COMPLETE"


def test_no_outputs_gives_empty_dict(client, stack_names):
    assert heat(client).apply(request(stack_names(), {"n": {"Type": "OS::Heat::None"}})) == {}


# ------------------------------------------------------------ failures

def test_failing_update_is_a_stack_failure_with_status_and_reason(client, stack_names):
    name = stack_names()
    stacks = heat(client)
    stacks.apply(request(name, RANDOM_A, OUT_A))
    with pytest.raises(StackFailure) as caught:
        stacks.apply(request(name, {"boom": {"Type": "OS::Heat::TestResource",
                                             "Properties": {"fail": True}}}))
    failure = caught.value
    assert "UPDATE_FAILED" in failure.message
    assert name in failure.message
    assert "boom" in failure.reason and "failed" in failure.reason.lower()
    assert failure.reason in failure.message


def test_failing_create_is_a_stack_failure(client, stack_names):
    with pytest.raises(StackFailure) as caught:
        heat(client).apply(request(stack_names(), {"boom": {
            "Type": "OS::Heat::TestResource", "Properties": {"fail": True}}}))
    assert "CREATE_FAILED" in caught.value.message


def test_invalid_template_is_a_stack_failure_from_the_http_error(client, stack_names):
    name = stack_names()
    with pytest.raises(StackFailure) as caught:
        heat(client).apply(request(name, {"x": {"Type": "No::Such::Type"}}))
    assert "No::Such::Type" in caught.value.message
    assert "ERROR:" not in caught.value.reason
    with pytest.raises(heat_exc.HTTPNotFound):
        client.stacks.get(name)


def test_invalid_update_keeps_the_stack(client, stack_names):
    name = stack_names()
    stacks = heat(client)
    first = stacks.apply(request(name, RANDOM_A, OUT_A))
    with pytest.raises(StackFailure) as caught:
        stacks.apply(request(name, {"x": {"Type": "No::Such::Type"}}))
    assert "No::Such::Type" in caught.value.reason
    assert client.stacks.get(name).stack_status == "CREATE_COMPLETE"
    assert stacks.apply(request(name, {})) == first


def test_timeout_is_a_stack_failure(client, stack_names):
    name = stack_names()
    stacks = heat(client, timeout=0.5)
    with pytest.raises(StackFailure) as caught:
        stacks.apply(request(name, {"slow": {"Type": "OS::Heat::TestResource",
                                             "Properties": {"wait_secs": 3}}}))
    assert "timed out" in caught.value.message
    assert "CREATE_IN_PROGRESS" in caught.value.message
    assert "timeout" in caught.value.reason
    # the stack goes on in Heat; a later apply waits for it before updating
    # (deleting it while in progress makes Heat wait about a minute)
    assert heat(client).apply(request(name, {})) == {}
    assert client.stacks.get(name).stack_status == "UPDATE_COMPLETE"
    heat(client).delete(name)
    with pytest.raises(heat_exc.HTTPNotFound):
        client.stacks.get(name)


def test_unreachable_heat_is_a_stack_failure():
    dead = heatclient.Client("1", endpoint="http://127.0.0.1:9/v1/admin", token="t")
    with pytest.raises(StackFailure, match="^stack ft-nowhere: Error communicating with "):
        HeatStacks(dead, timeout=5).apply(request("ft-nowhere", {}))


# ------------------------------------------------------------ delete

def test_delete_then_delete_again(client, stack_names):
    name = stack_names()
    stacks = heat(client)
    stacks.apply(request(name, RANDOM_A, OUT_A))
    stacks.delete(name)
    with pytest.raises(heat_exc.HTTPNotFound):
        client.stacks.get(name)
    stacks.delete(name)  # absent: fine
    stacks.delete(f"ft-never-{uuid.uuid4().hex[:8]}")


def test_create_after_delete_makes_a_new_stack(client, stack_names):
    name = stack_names()
    stacks = heat(client)
    stacks.apply(request(name, RANDOM_A, OUT_A))
    stacks.delete(name)
    stacks.apply(request(name, {"n": {"Type": "OS::Heat::None"}}))
    assert set(client.stacks.template(name)["Resources"]) == {"n"}


# ------------------------------------------------------------ remove

def test_remove_drops_a_resource_and_its_outputs_and_keeps_the_rest(client, stack_names):
    name = stack_names()
    stacks = heat(client)
    first = stacks.apply(request(
        name, {**RANDOM_A, "b": {"Type": "OS::Heat::Value",
                                 "Properties": {"value": {"Ref": "p"}}}},
        {**OUT_A, "bValue": {"Value": {"Fn::GetAtt": ["b", "value"]}},
         "bId": {"Value": {"Ref": "b"}}},
        parameters={"p": "kept"}, Parameters={"p": {"Type": "String"}}))
    assert set(first) == {"aValue", "bValue", "bId"}

    assert stacks.remove(name, ["a", "ghost"]) == {"bValue": "kept", "bId": first["bId"]}
    live = client.stacks.template(name)
    assert set(live["Resources"]) == {"b"}
    assert set(live["Outputs"]) == {"bValue", "bId"}
    assert client.stacks.get(name).stack_status == "UPDATE_COMPLETE"
    assert [r.resource_name for r in client.resources.list(name)] == ["b"]
    # the parameter stayed with the stack (PATCH), and b was not replaced
    assert client.stacks.get(name).parameters["p"] == "kept"

    # nothing of it left: no update; the last resource: the stack is deleted
    assert stacks.remove(name, ["a"]) == {"bValue": "kept", "bId": first["bId"]}
    assert stacks.remove(name, ["b"]) == {}
    with pytest.raises(heat_exc.HTTPNotFound):
        client.stacks.get(name)
    assert stacks.remove(name, ["b"]) == {}   # absent


def test_remove_one_of_two_instances(client, stack_names):
    name = stack_names()
    stacks = heat(client, resource_registry={"AWS::EC2::Instance": PROVIDER_FILE},
                  files={PROVIDER_FILE: INSTANCE_PROVIDER})
    two = {"web1": INSTANCE["web1"], "web2": INSTANCE["web1"]}
    outputs = {f"{unit}Ip": {"Value": {"Fn::GetAtt": [unit, "PrivateIp"]}} for unit in two}
    first = stacks.apply(request(name, two, outputs))
    web1 = [r.physical_resource_id for r in client.resources.list(name)
            if r.resource_name == "web1"]
    assert stacks.remove(name, ["web2"]) == {"web1Ip": first["web1Ip"]}
    assert set(client.stacks.template(name)["Resources"]) == {"web1"}
    # web1 is the same nested stack as before: untouched by the removal
    assert [r.physical_resource_id for r in client.resources.list(name)] == web1


def test_remove_of_a_referenced_resource_is_refused_before_heat(client, stack_names):
    name = stack_names()
    stacks = heat(client)
    stacks.apply(request(name, {**RANDOM_A, "b": {"Type": "OS::Heat::Value", "Properties": {
        "value": {"Fn::GetAtt": ["a", "value"]}}}}))
    with pytest.raises(StackFailure) as caught:
        stacks.remove(name, ["a"])
    assert "'b' refers to 'a'" in caught.value.message and name in caught.value.message
    assert set(client.stacks.template(name)["Resources"]) == {"a", "b"}
    assert client.stacks.get(name).stack_status == "CREATE_COMPLETE"


# ------------------------------------------------------------ resource registry

INSTANCE = {"web1": {"Type": "AWS::EC2::Instance",
                     "Properties": {"ImageId": "ws-2012-std", "InstanceType": "m1.small"}}}


def test_registry_remaps_ec2_instance_to_none(client, stack_names):
    name = stack_names()
    stacks = heat(client, resource_registry=INSTANCE_TO_NONE)
    out = stacks.apply(request(name, INSTANCE, {"id": {"Value": {"Ref": "web1"}}}))
    assert out["id"]
    # the registry goes with every update too (PUT replaces the environment)
    stacks.apply(request(name, {"web2": {"Type": "AWS::EC2::Instance",
                                         "Properties": {"ImageId": "x"}}}))
    [resource] = [r for r in client.resources.list(name) if r.resource_name == "web1"]
    assert resource.resource_type == "AWS::EC2::Instance"
    assert resource.resource_status in ("CREATE_COMPLETE", "UPDATE_COMPLETE")


def test_without_registry_ec2_instance_cannot_be_made(client, stack_names):
    with pytest.raises(StackFailure):
        heat(client).apply(request(stack_names(), INSTANCE))


def test_provider_template_in_files_gives_private_ip(client, stack_names):
    name = stack_names()
    stacks = heat(client, resource_registry={"AWS::EC2::Instance": PROVIDER_FILE},
                  files={PROVIDER_FILE: INSTANCE_PROVIDER})
    out = stacks.apply(request(name, INSTANCE,
                               {"ip": {"Value": {"Fn::GetAtt": ["web1", "PrivateIp"]}}}))
    assert out["ip"].startswith("10.0.0.") and len(out["ip"]) == len("10.0.0.") + 2


def test_environment_file_with_provider_template(client, stack_names, tmp_path):
    (tmp_path / PROVIDER_FILE).write_text(INSTANCE_PROVIDER)
    env = tmp_path / "env.yaml"
    env.write_text(f"resource_registry:\n  AWS::EC2::Instance: {PROVIDER_FILE}\n")
    environment, files = load_environment(str(env))
    assert len(files) == 1
    name = stack_names()
    out = heat(client, environment=environment, files=files).apply(request(
        name, INSTANCE, {"ip": {"Value": {"Fn::GetAtt": ["web1", "PublicIp"]}}}))
    assert out["ip"].startswith("172.16.0.")


def test_load_environment_forms(tmp_path):
    assert load_environment(None) == ({}, {})
    assert load_environment(json.dumps(INSTANCE_TO_NONE)) == (
        {"resource_registry": INSTANCE_TO_NONE}, {})
    whole = {"resource_registry": {"OS::Nova::*": "OS::Heat::None"}}
    assert load_environment(json.dumps(whole)) == (whole, {})
    env = tmp_path / "env.json"
    env.write_text(json.dumps(whole))
    assert load_environment(str(env))[0]["resource_registry"] == whole["resource_registry"]
    with pytest.raises(ValueError, match=r"^\[heat\] resource_registry: invalid JSON"):
        load_environment("{not json")
    with pytest.raises(ValueError, match=r"^\[heat\] resource_registry: no such file "):
        load_environment(str(tmp_path / "missing.yaml"))


# ------------------------------------------------------------ configuration

def make_conf(**heat_values) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    config.register(conf)
    conf([])
    for key, value in heat_values.items():
        conf.set_override(key, value, group="heat")
    return conf


def test_heat_options_are_listed():
    groups = dict(config.list_opts())
    names = {opt.dest for opt in groups["heat"]}
    assert {"url", "auth_url", "username", "password", "resource_registry",
            "poll_start", "poll_max", "stack_timeout"} <= names
    assert [o for o in groups["heat"] if o.dest == "password"][0].secret


def test_from_config_with_url_and_task_token(stack_names):
    url = heat_url()
    tenant = url.rstrip("/").rsplit("/", 1)[1]
    template_url = url.rstrip("/").rsplit("/", 1)[0] + "/%(tenant_id)s"
    conf = make_conf(url=template_url, resource_registry=json.dumps(INSTANCE_TO_NONE),
                     poll_start=0.1, poll_max=0.5, stack_timeout=60)
    stacks = HeatStacks.from_config(conf, token="task-token", tenant_id=tenant)
    assert (stacks.poll_start, stacks.poll_max, stacks.timeout) == (0.1, 0.5, 60)
    assert stacks.environment == {"resource_registry": INSTANCE_TO_NONE}
    out = stacks.apply(request(stack_names(), INSTANCE, {"id": {"Value": {"Ref": "web1"}}}))
    assert out["id"]


def test_from_config_needs_an_endpoint():
    with pytest.raises(ValueError, match=r"^\[heat\] needs url, or a Keystone"):
        HeatStacks.from_config(make_conf())
    with pytest.raises(ValueError,
                       match=r"^\[heat\] url needs %\(tenant_id\)s but the task has no tenant"):
        HeatStacks.from_config(make_conf(url="http://h:8004/v1/%(tenant_id)s"), token="t")


def test_tokens_are_not_logged(client, stack_names, caplog):
    caplog.set_level(logging.DEBUG)
    name = stack_names()
    stacks = heat(client)
    stacks.apply(request(name, RANDOM_A, OUT_A))
    stacks.delete(name)
    assert "fornace-test-token" not in caplog.text


# ------------------------------------------------------------ end to end

INSTANCE_TEMPLATE = {
    "AWSTemplateFormatVersion": "2010-09-09",
    "Resources": {"$instanceName": {"Type": "AWS::EC2::Instance",
                                    "Properties": {"ImageId": "$image",
                                                   "InstanceType": "m1.small"}}},
    "Outputs": {"$ipKey": {"Value": {"Fn::GetAtt": ["$instanceName", "PrivateIp"]}}},
}
BROKEN_TEMPLATE = {
    "Resources": {"$instanceName-broken": {"Type": "OS::Heat::TestResource",
                                           "Properties": {"fail": True}}},
}
NEW_UNITS = "$.services[*].units[?(@.state.ip is None and @.state.heatError is None)]"
IP_UNITS = "$.services[*].units[?(@.state.ip is not None and @.state.configured is None)]"


def e2e_workflow(template: str) -> str:
    return f"""<workflow>
<rule match="{NEW_UNITS}">
  <mute/>
  <update-cf-stack template="{template}" result="out" error="err">
    <parameter name="mappings"><map>
      <item name="instanceName"><select path="name"/></item>
      <item name="ipKey"><select path="name"/>Ip</item>
      <item name="image"><select path="::osImage.name"/></item>
    </map></parameter>
    <success>
      <set path="state.outputs"><select path="#out"/></set>
      <set path="state.ip"><select path="#out"/></set>
    </success>
    <failure>
      <set path="state.heatError"><select path="#err"/></set>
    </failure>
  </update-cf-stack>
</rule>
<rule match="{IP_UNITS}">
  <mute/>
  <send-command template="Configure" result="res">
    <parameter name="unit"><select path="id"/></parameter>
    <parameter name="service"><select path="::id"/></parameter>
    <success><set path="state.configured"><select path="#res.0.Result.0"/></set></success>
  </send-command>
</rule>
</workflow>
"""


def e2e_model() -> dict:
    env = uuid.uuid4().hex[:10]
    return {"id": env, "name": "heat-e2e", "token": "model-token-xyz",
            "services": [{"id": "svc1", "name": "web", "type": "webServer",
                          "osImage": {"name": "ws-2012-std"},
                          "units": [{"id": "u1", "name": "web_instance_1"},
                                    {"id": "u2", "name": "web_instance_2"}]}]}


def e2e_stacks(client) -> HeatStacks:
    return heat(client, resource_registry={"AWS::EC2::Instance": PROVIDER_FILE},
                files={PROVIDER_FILE: INSTANCE_PROVIDER})


def test_session_end_to_end_outputs_reach_success(client, catalog):
    catalog.heat("Instance", INSTANCE_TEMPLATE)
    catalog.agent("Configure")
    catalog.workflow(e2e_workflow("Instance"))
    model = e2e_model()
    stack_name = f"e{model['id']}"
    stacks = e2e_stacks(client)
    try:
        run = catalog.run(model, stacks=stacks)
        assert run.status == "success", run.reports
        units = {u["id"]: u for u in run.model["services"][0]["units"]}
        # one merged create for both units: both outputs come back to each unit
        for unit in units.values():
            outputs = unit["state"]["outputs"]
            assert set(outputs) == {"web_instance_1Ip", "web_instance_2Ip"}
            assert all(ip.startswith("10.0.0.") for ip in outputs.values())
            assert unit["state"]["configured"] == "ok"
            assert "heatError" not in unit["state"]
        assert [p.unit for p in run.agents.plans] == ["u1", "u2"]
        live = client.stacks.get(stack_name)
        assert live.stack_status == "CREATE_COMPLETE"
        assert set(client.stacks.template(stack_name)["Resources"]) == {
            "web_instance_1", "web_instance_2"}
    finally:
        stacks.delete(stack_name)


def test_session_end_to_end_heat_failure_reaches_failure(client, catalog):
    catalog.heat("Broken", BROKEN_TEMPLATE)
    catalog.agent("Configure")
    catalog.workflow(e2e_workflow("Broken"))
    model = e2e_model()
    stack_name = f"e{model['id']}"
    stacks = e2e_stacks(client)
    try:
        run = catalog.run(model, stacks=stacks)
        assert run.status == "success", run.reports
        for unit in run.model["services"][0]["units"]:
            error = unit["state"]["heatError"]
            assert set(error) == {"message", "strerror", "timestamp"}
            assert "CREATE_FAILED" in error["message"]
            assert "failed" in error["strerror"].lower()
            datetime.datetime.fromisoformat(error["timestamp"])
            assert "ip" not in unit["state"] and "configured" not in unit["state"]
        assert run.agents.plans == []
    finally:
        stacks.delete(stack_name)


# ------------------------------------------------------------ polling (no Heat needed)

class _Stack:
    def __init__(self, status: str) -> None:
        self.stack_name, self.id, self.stack_status = "s", "id1", status
        self.stack_status_reason, self.updated_time, self.outputs = "", None, []


class _FakeStacks:
    """Answers ``get`` with a scripted sequence of statuses."""

    def __init__(self, statuses: list[str]) -> None:
        self.statuses = statuses

    def get(self, stack_id, resolve_outputs=True):
        if stack_id == "s" and resolve_outputs is False and not hasattr(self, "created"):
            raise heat_exc.HTTPNotFound()
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return _Stack(status)

    def create(self, **fields):
        self.created = fields
        return {"stack": {"id": "id1"}}


class _FakeClient:
    def __init__(self, statuses: list[str]) -> None:
        self.stacks = _FakeStacks(statuses)


def test_polling_backs_off_doubling_up_to_poll_max():
    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    fake = _FakeClient(["CREATE_IN_PROGRESS"] * 7 + ["CREATE_COMPLETE"])
    stacks = HeatStacks(fake, {"A::B": "OS::Heat::None"}, poll_start=0.5, poll_max=5.0,
                        timeout=0, sleep=sleep, clock=lambda: now[0])
    assert stacks.apply(StackRequest("s", {"Resources": {}}, {})) == {}
    assert sleeps == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    created = fake.stacks.created
    assert created["environment"] == {"resource_registry": {"A::B": "OS::Heat::None"}}
    assert created["template"]["AWSTemplateFormatVersion"] == "2010-09-09"

    now[0], sleeps[:] = 0.0, []
    fake = _FakeClient(["CREATE_IN_PROGRESS"])
    stacks = HeatStacks(fake, poll_start=0.5, poll_max=5.0, timeout=3.0,
                        sleep=sleep, clock=lambda: now[0])
    with pytest.raises(StackFailure, match="timed out after 3s"):
        stacks.apply(StackRequest("s", {"Resources": {}}, {}))
    assert sleeps == [0.5, 1.0, 1.5]
