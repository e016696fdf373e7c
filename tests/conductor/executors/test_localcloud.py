"""The local cloud: stacks as folders, instances as real ``fornace agent`` processes."""
from __future__ import annotations

import base64
import json
import os
import signal
import uuid
from pathlib import Path

import pytest

from fornace.common import contract
from fornace.common.broker import Broker
from fornace.conductor.executors.base import StackFailure, StackRequest
from fornace.conductor.executors.localcloud import LocalStacks
from fornace.conductor.executors.processes import TOKEN_VARIABLE
from waiting import wait_for

DATA = Path(__file__).resolve().parents[3] / "data"


def render_user_data(broker_url: str, env: str, unit: str) -> str:
    """What prepare-user-data renders: init.sh with the agent config inside."""
    values = {
        "BROKER_URL": broker_url, "RABBITMQ_SSL": "False", "BROKER_QUEUE_TYPE": "classic",
        "RABBITMQ_INPUT_QUEUE": contract.agent_queue(env, "svc", unit),
        "RESULT_QUEUE": contract.results_queue(env), "INTERNAL_HOSTNAME": unit,
        "MURANO_SERVER_ADDRESS": "127.0.0.1",
    }
    config = (DATA / "templates/agent-config/Default.template").read_text()
    for key, value in values.items():
        config = config.replace(f"%{key}%", value)
    values["AGENT_CONFIG_BASE64"] = base64.b64encode(config.encode()).decode()
    script = (DATA / "init-scripts/init.sh").read_text()
    for key, value in values.items():
        script = script.replace(f"%{key}%", value)
    return script


def instance(user_data: str | None, kind: str = "AWS::EC2::Instance") -> dict:
    key = "UserData" if kind == "AWS::EC2::Instance" else "user_data"
    props = {"ImageId": "img", "InstanceType": "m1.small"}
    if user_data is not None:
        props[key] = user_data
    return {"Type": kind, "Properties": props}


def request(stack: str, template: dict) -> StackRequest:
    return StackRequest(stack, template, {})


def alive(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rfind(")") + 2] not in "ZX"


def shell_plan(script: str, plan_id: str) -> dict:
    return {"FormatVersion": "2.0", "ID": plan_id,
            "Scripts": [base64.b64encode(script.encode()).decode()],
            "ScriptNames": ["run.sh"], "Commands": [{"Name": "run.sh", "Arguments": {}}],
            "RebootOnCompletion": 0}


@pytest.fixture
def cloud(tmp_path):
    stacks = LocalStacks(tmp_path / "cloud", stop_timeout=10)
    made: list[str] = []
    yield stacks, made
    for name in made:     # never leave agents behind
        stacks.delete(name)


# ----------------------------------------------------------------- without a broker

def test_an_instance_without_user_data_is_a_quiet_sandbox(cloud):
    stacks, made = cloud
    made.append("equiet")
    outputs = stacks.apply(request("equiet", {
        "Resources": {"vm": instance(None, "OS::Nova::Server"),
                      "other": {"Type": "OS::Heat::None"}},
        "Outputs": {"ip": {"Value": {"Fn::GetAtt": ["vm", "PrivateIp"]}}}}))
    assert outputs == {"ip": stacks.instances("equiet")["vm"]["address"]}
    assert outputs["ip"].startswith("127.") and outputs["ip"] != "127.0.0.1"
    assert (stacks.state_dir / "equiet" / "vm").is_dir()
    assert not (stacks.state_dir / "equiet" / "other").exists()
    assert json.loads((stacks.state_dir / "equiet/template.json").read_text())["Resources"]


def test_a_broken_user_data_is_a_stack_failure(cloud):
    stacks, made = cloud
    made.append("ebroken")
    with pytest.raises(StackFailure,
                       match="^stack ebroken failed: instance vm: .* with code 7") as failure:
        stacks.apply(request("ebroken", {"Resources": {
            "vm": instance("#!/bin/sh\necho booting the broken one\nexit 7\n")}}))
    assert "instance vm" in failure.value.message
    assert "code 7" in failure.value.message
    assert "booting the broken one" in failure.value.message
    # the next round tries again (and fails the same way)
    with pytest.raises(StackFailure,
                       match="^stack ebroken failed: instance vm: .* with code 7"):
        stacks.apply(request("ebroken", {"Resources": {}}))


def test_an_agent_dying_at_start_is_a_stack_failure(cloud):
    stacks, made = cloud
    made.append("enoqueue")
    # a config without input queue: the agent exits 2 at once
    script = ("#!/bin/sh\nmkdir -p \"$FORNACE_ETC\"\n"
              "printf '[DEFAULT]\\nbroker_url = amqp://127.0.0.1//\\n' > $FORNACE_ETC/agent.conf\n"
              "exec fornace --config-file $FORNACE_ETC/agent.conf agent "
              "--work-dir \"$FORNACE_AGENT_WORK_DIR\"\n")
    with pytest.raises(StackFailure,
                       match="^stack enoqueue failed: instance vm: .* with code 2") as failure:
        stacks.apply(request("enoqueue", {"Resources": {"vm": instance(script)}}))
    assert "instance vm" in failure.value.message and "code 2" in failure.value.message
    assert "input_queue" in failure.value.message


def test_a_memory_broker_is_refused(cloud):
    stacks, made = cloud
    made.append("ememory")
    config = "[DEFAULT]\nbroker_url = memory://\ninput_queue = q\nresult_routing_key = r\n"
    script = ("#!/bin/sh\nmkdir -p \"$FORNACE_ETC\"\n"
              f"echo '{base64.b64encode(config.encode()).decode()}' | base64 -d "
              "> $FORNACE_ETC/agent.conf\n"
              "exec fornace --config-file $FORNACE_ETC/agent.conf agent "
              "--work-dir \"$FORNACE_AGENT_WORK_DIR\"\n")
    with pytest.raises(StackFailure,
                       match="configured with the in-process memory:// broker") as failure:
        stacks.apply(request("ememory", {"Resources": {"vm": instance(script)}}))
    assert "memory://" in failure.value.message
    info = stacks.instances("ememory")["vm"]
    assert not info["running"]


def test_removed_and_deleted_instances_stop_their_process_group(cloud):
    stacks, made = cloud
    made.append("esleep")
    # a boot script that ignores nothing: a child process in the same group
    script = "#!/bin/sh\nsleep 300 &\nexec sleep 300\n"
    stacks.apply(request("esleep", {"Resources": {"a": instance(script),
                                                  "b": instance(script)}}))
    pids = {name: info["pid"] for name, info in stacks.instances("esleep").items()}
    assert all(alive(pid) for pid in pids.values())
    # idempotent: a second round with the same template leaves them alone
    stacks.apply(request("esleep", {"Resources": {"a": instance(script)}}))
    assert {n: i["pid"] for n, i in stacks.instances("esleep").items()} == pids
    stacks.apply(request("esleep", {"Resources": {"b": None}}))
    assert not alive(pids["b"]) and alive(pids["a"])
    assert not (stacks.state_dir / "esleep" / "b").exists()
    assert "b" not in stacks.template("esleep")["Resources"]
    stacks.delete("esleep")
    assert not alive(pids["a"])
    assert not (stacks.state_dir / "esleep").exists()
    stacks.delete("esleep")   # absent is fine


def test_a_process_that_died_is_started_again(cloud):
    stacks, made = cloud
    made.append("erestart")
    script = "#!/bin/sh\nexec sleep 300\n"
    stacks.apply(request("erestart", {"Resources": {"a": instance(script)}}))
    pid = stacks.instances("erestart")["a"]["pid"]
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not stacks.instances("erestart")["a"]["running"])
    stacks.apply(request("erestart", {"Resources": {}}))
    again = stacks.instances("erestart")["a"]
    assert again["running"] and again["pid"] != pid


def test_an_instance_half_started_by_a_dead_conductor_is_not_started_twice(cloud):
    """Regression: a conductor killed while the local cloud started an instance
    (its boot process running, its pid not yet written) left an agent nobody
    tracked, and the next apply started a second one for the same unit."""
    stacks, made = cloud
    made.append("ehalf")
    script = "#!/bin/sh\nexec sleep 300\n"
    stacks.apply(request("ehalf", {"Resources": {"a": instance(script)}}))
    info_path = stacks.state_dir / "ehalf" / "a" / "instance.json"
    info = json.loads(info_path.read_text())
    orphan = info.pop("pid")
    info.pop("start_time", None)
    info_path.write_text(json.dumps(info))        # as the dead conductor left it
    stacks.apply(request("ehalf", {"Resources": {"a": instance(script)}}))
    assert wait_for(lambda: not alive(orphan))      # found by its token and stopped
    again = stacks.instances("ehalf")["a"]
    assert again["running"] and again["pid"] != orphan


def test_bad_names_are_refused(cloud):
    stacks, _ = cloud
    with pytest.raises(StackFailure, match=r"^stack name '\.\./x' cannot be a folder name"):
        stacks.apply(request("../x", {"Resources": {}}))
    with pytest.raises(StackFailure,
                       match=r"^stack ebadname: instance name '\.\./vm' cannot be a folder name"):
        stacks.apply(request("ebadname", {"Resources": {"../vm": instance(None)}}))
    stacks.delete("ebadname")


# ------------------------------------------------- with RabbitMQ or the folder broker

@pytest.fixture(params=["amqp", "folder"])
def shared_broker(request, tmp_path):
    """A broker URL other processes reach: RabbitMQ, or a folder."""
    if request.param == "amqp":
        return request.getfixturevalue("amqp_vhost")
    return f"filesystem://{tmp_path}/broker"


def test_two_agents_answer_plans_then_stop(cloud, shared_broker):
    url = shared_broker
    stacks, made = cloud
    env = uuid.uuid4().hex[:10]
    stack = f"e{env}"
    made.append(stack)
    template = {
        "Resources": {unit: instance(render_user_data(url, env, unit),
                                     "OS::Nova::Server" if unit == "u2" else
                                     "AWS::EC2::Instance") for unit in ("u1", "u2")},
        "Outputs": {"u1ip": {"Value": {"Fn::GetAtt": ["u1", "PrivateIp"]}},
                    "u2ip": {"Value": {"get_attr": ["u2", "first_address"]}}}}
    outputs = stacks.apply(request(stack, template))
    instances = stacks.instances(stack)
    # each instance has its own loopback address, as VMs have their own IP
    assert outputs == {"u1ip": instances["u1"]["address"], "u2ip": instances["u2"]["address"]}
    assert outputs["u1ip"] != outputs["u2ip"]
    assert set(instances) == {"u1", "u2"} and all(i["running"] for i in instances.values())
    for unit in ("u1", "u2"):
        conf = (stacks.state_dir / stack / unit / "etc" / "agent.conf").read_text()
        assert contract.agent_queue(env, "svc", unit) in conf

    results = contract.results_queue(env)
    broker = Broker(url)
    try:
        for unit in ("u1", "u2"):
            broker.publish(contract.agent_queue(env, "svc", unit),
                           shell_plan('echo "hello from $FORNACE_WORK_DIR"; '
                                      'echo "at $FORNACE_INSTANCE_ADDRESS"', f"plan-{unit}"),
                           f"plan-{unit}")
        answers: dict = {}

        def both_answered() -> bool:
            for body, message_id in broker.drain(results, timeout=1.0):
                if not contract.is_plan_log(body):
                    answers[message_id] = body
            return len(answers) >= 2
        wait_for(both_answered, "the answers of both agents", timeout=60,
                 explain=lambda: f"got {sorted(answers)}")
        assert set(answers) == {"plan-u1", "plan-u2"}
        for unit in ("u1", "u2"):
            answer = answers[f"plan-{unit}"]
            assert answer["IsException"] is False
            work = stacks.state_dir / stack / unit / "work"
            assert answer["Result"][0]["Result"] == [
                f"hello from {work}", f"at {instances[unit]['address']}"]

        # a round removing u2 stops its agent and removes its sandbox; u1 stays
        pids = {u: i["pid"] for u, i in instances.items()}
        stacks.apply(request(stack, {"Resources": {"u2": None}}))
        assert not alive(pids["u2"]) and alive(pids["u1"])
        assert not (stacks.state_dir / stack / "u2").exists()
        assert stacks.instances(stack)["u1"]["pid"] == pids["u1"]

        stacks.delete(stack)
        assert not alive(pids["u1"])
        assert not (stacks.state_dir / stack).exists()
    finally:
        for unit in ("u1", "u2"):
            broker.delete(contract.agent_queue(env, "svc", unit))
        broker.delete(results)
        broker.close()


def processes_with_token(token: str) -> list[int]:
    """Live processes carrying an instance's token (its agent, and what it left running)."""
    marker = f"{TOKEN_VARIABLE}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and alive(int(entry)):
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker in environ:
                found.append(int(entry))
    return found


def ask(broker: Broker, env: str, unit: str, script: str, plan_id: str) -> dict:
    """Send one shell plan to a unit's agent and wait for its answer."""
    results = contract.results_queue(env)
    broker.publish(contract.agent_queue(env, "svc", unit), shell_plan(script, plan_id), plan_id)
    return wait_for(lambda: next((body for body, message_id in broker.drain(results, timeout=1.0)
                                  if message_id == plan_id), None),
                    f"the answer to {plan_id} from {unit}", timeout=60)


def test_remove_stops_exactly_the_removed_instance(cloud, shared_broker):
    url = shared_broker
    stacks, made = cloud
    env = uuid.uuid4().hex[:10]
    stack = f"e{env}"
    made.append(stack)
    stacks.apply(request(stack, {
        "Resources": {unit: instance(render_user_data(url, env, unit)) for unit in ("u1", "u2")},
        "Outputs": {f"{unit}ip": {"Value": {"Fn::GetAtt": [unit, "PrivateIp"]}}
                    for unit in ("u1", "u2")}}))
    before = stacks.instances(stack)
    broker = Broker(url)
    try:
        # u2's agent leaves a server running: it belongs to u2 and must stop with it
        answer = ask(broker, env, "u2", "nohup sleep 300 >/dev/null 2>&1 &\necho started",
                     "plan-u2-server")
        assert answer["IsException"] is False
        u2_processes = processes_with_token(before["u2"]["token"])
        assert before["u2"]["pid"] in u2_processes and len(u2_processes) >= 2

        outputs = stacks.remove(stack, ["u2", "not-there"])

        assert outputs == {"u1ip": before["u1"]["address"]}
        assert wait_for(lambda: not processes_with_token(before["u2"]["token"]), timeout=5)
        assert not (stacks.state_dir / stack / "u2").exists()
        template = stacks.template(stack)
        assert set(template["Resources"]) == {"u1"} and set(template["Outputs"]) == {"u1ip"}
        after = stacks.instances(stack)
        assert set(after) == {"u1"} and after["u1"]["running"]
        assert after["u1"]["pid"] == before["u1"]["pid"] and alive(before["u1"]["pid"])
        answer = ask(broker, env, "u1", "echo still here", "plan-u1-after")
        assert answer["IsException"] is False
        assert answer["Result"][0]["Result"] == ["still here"]

        # removing the last instance deletes the stack; then it is absent
        assert stacks.remove(stack, ["u1"]) == {}
        assert not alive(before["u1"]["pid"])
        assert not (stacks.state_dir / stack).exists()
        assert stacks.remove(stack, ["u1"]) == {}
    finally:
        for unit in ("u1", "u2"):
            broker.delete(contract.agent_queue(env, "svc", unit))
        broker.delete(contract.results_queue(env))
        broker.close()


def test_remove_refused_for_a_referenced_instance_changes_nothing(cloud):
    stacks, made = cloud
    made.append("erefused")
    script = "#!/bin/sh\nexec sleep 300\n"
    template = {"Resources": {"a": instance(script),
                              "b": {"Type": "OS::Heat::None", "DependsOn": "a"}}}
    stacks.apply(request("erefused", template))
    pid = stacks.instances("erefused")["a"]["pid"]
    with pytest.raises(StackFailure, match="'b' refers to 'a'"):
        stacks.remove("erefused", ["a"])
    assert stacks.template("erefused") == template
    assert stacks.instances("erefused")["a"]["pid"] == pid and alive(pid)
    # removing both is fine; a non-instance resource has no sandbox
    assert stacks.remove("erefused", ["b", "a"]) == {}
    assert not alive(pid) and stacks.template("erefused") is None


# ----------------------------------------------------------------- the daemon option

def test_the_daemon_makes_local_stacks(tmp_path):
    from fornace.cli.main import build_conf
    from fornace.conductor.executors import stacks_factory
    conf = build_conf()
    conf(["conductor", "--stacks", "local"], project="fornace", prog="fornace",
         default_config_files=[], default_config_dirs=[])
    conf.set_override("state_dir", str(tmp_path / "state"), group="api")
    stacks = stacks_factory(conf.command.stacks, conf)(None)
    assert isinstance(stacks, LocalStacks)
    assert stacks.state_dir == (tmp_path / "state" / "cloud").resolve()
    conf.set_override("cloud_dir", str(tmp_path / "c"), group="conductor")
    assert stacks_factory("local", conf)(None).state_dir == (tmp_path / "c").resolve()
