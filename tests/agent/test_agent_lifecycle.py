"""The agent's life: its state machine, the scripts' exit codes, log streaming.

The exit codes are tested with real agents: local cloud instances booted by
``init.sh`` on a folder broker, so a reboot is ``init.sh`` starting a new
agent process, and a power off or a stop ends the instance's agent.
"""
from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from fornace.agent.config import AgentSettings
from fornace.agent.holds import COMMANDS_ENDED, HOLD_VARIABLE
from fornace.agent.runner import safe_dir_name
from fornace.agent.service import EXIT_POWEROFF, EXIT_REBOOT, EXIT_STOPPED, Agent
from fornace.agent.states import Machine
from fornace.common import contract
from fornace.common.broker import Broker
from fornace.conductor.executors.agents import AmqpAgents
from fornace.conductor.executors.base import PlanRequest, StackRequest
from fornace.conductor.executors.localcloud import LocalStacks
from localkit import alive, instance_processes
from waiting import wait_for

DATA = Path(__file__).resolve().parents[2] / "data"
TIMEOUT = 90.0

# the script of the incomplete tests: incomplete the first time, done the second
STEP = """echo run >> "$FORNACE_WORK_DIR/step-runs"
if [ -f "$FORNACE_WORK_DIR/step-marker" ]; then echo "second run"; exit 0; fi
touch "$FORNACE_WORK_DIR/step-marker"
echo "first run"
exit "$CODE"
"""
FIRST = 'echo x >> "$FORNACE_WORK_DIR/first-runs"\necho "first done"\n'


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def cmd(name: str, **arguments) -> dict:
    return {"Name": name, "Arguments": arguments}


def v2_plan(scripts: dict[str, str], commands: list, plan_id: str | None = None) -> dict:
    return {"FormatVersion": "2.0", "ID": plan_id or uuid.uuid4().hex,
            "Scripts": [b64(text) for text in scripts.values()], "ScriptNames": list(scripts),
            "Commands": commands, "RebootOnCompletion": 0}


def incomplete_plan(code: int) -> dict:
    return v2_plan({"first.sh": FIRST, "step.sh": STEP},
                   [cmd("first.sh"), cmd("step.sh", CODE=code)])


def transitions(records) -> list[str]:
    return [r.getMessage()[len("agent state: "):] for r in records
            if r.getMessage().startswith("agent state: ") and "->" in r.getMessage()]


# ================================================================ in one process

@pytest.fixture
def settings(tmp_path):
    env = uuid.uuid4().hex[:10]
    return AgentSettings(work_dir=tmp_path / "work", broker_url="memory://",
                         input_queue=contract.agent_queue(env, "svc", "unit"),
                         result_queue=contract.results_queue(env))


def serve(agent: Agent, stop: threading.Event) -> tuple[threading.Thread, dict]:
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("code", agent.serve(stop)),
                              daemon=True)
    thread.start()
    return thread, out


def answers(broker: Broker, queue: str, count: int) -> list:
    """The answers of a results queue (log messages left out), in order: those
    there now, once ``count`` of them came."""
    got: list = []

    def came() -> bool:
        got.extend((body, mid) for body, mid in broker.drain(queue, timeout=0.5)
                   if not contract.is_plan_log(body))
        return len(got) >= count
    wait_for(came, f"{count} answers on {queue}", timeout=TIMEOUT, explain=lambda: f"got {got}")
    return got


def test_state_transitions_are_logged_in_order(settings, caplog):
    caplog.set_level(logging.INFO, logger="fornace.agent")
    plans = [v2_plan({"a.sh": "echo a"}, [cmd("a.sh")], "plan-a"),
             v2_plan({"b.sh": "echo b; exit 64"}, [cmd("b.sh")], "plan-b")]
    with Broker(settings.broker_url) as broker:
        for plan in plans:
            broker.publish(settings.input_queue, plan, plan["ID"])
        thread, out = serve(Agent(settings), threading.Event())
        thread.join(TIMEOUT)
        assert out.get("code") == EXIT_REBOOT
        assert transitions(caplog.records) == [
            f"INIT -> WAIT_FOR_RUNNABLE (journal read, 0 answer(s) sent, subscribed to "
            f"{settings.input_queue})",
            "WAIT_FOR_RUNNABLE -> RUN_TASK (plan plan-a received)",
            "RUN_TASK -> WAIT_FOR_RUNNABLE (plan plan-a answered)",
            "WAIT_FOR_RUNNABLE -> RUN_TASK (plan plan-b received)",
            "RUN_TASK -> REBOOT (plan plan-b answered; b.sh exited 64: reboot)"]
        assert [m for _, m in answers(broker, settings.result_queue, 2)] == \
            ["plan-a", "plan-b"]

        caplog.clear()      # the restart: nothing to do, then the stop signal
        stop = threading.Event()
        thread, out = serve(Agent(settings), stop)
        assert wait_for(lambda: len(transitions(caplog.records)) >= 1)
        stop.set()
        thread.join(TIMEOUT)
        assert out.get("code") == 0
        assert [t.split(" (")[0] for t in transitions(caplog.records)] == [
            "INIT -> WAIT_FOR_RUNNABLE", "WAIT_FOR_RUNNABLE -> EXIT"]
        assert transitions(caplog.records)[-1].endswith("(stop signal)")


def test_an_init_error_is_retried_until_the_stop_signal(settings, caplog):
    caplog.set_level(logging.INFO, logger="fornace.agent")
    settings.broker_url = "filesystem://not-a-folder-url"    # every INIT fails
    stop = threading.Event()
    machine = Machine(Agent(settings), stop, retry_delay=0.05)
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("code", machine.run()),
                              daemon=True)
    thread.start()
    assert wait_for(lambda: len(transitions(caplog.records)) >= 2, timeout=30)
    stop.set()
    thread.join(TIMEOUT)
    assert out.get("code") == 0
    steps = [t.split(" (")[0] for t in transitions(caplog.records)]
    assert steps[:2] == ["INIT -> INIT", "INIT -> INIT"] and steps[-1] == "INIT -> EXIT"
    assert "error: ValueError" in transitions(caplog.records)[0]


def test_broker_and_handling_errors_go_back_to_init(settings, caplog, monkeypatch):
    from fornace.agent.inbox import PlanInbox
    caplog.set_level(logging.INFO, logger="fornace.agent")
    failures = {"get": 1, "execute": 1}
    real_get, real_execute = PlanInbox.get, Agent.execute

    def get(self, timeout):
        if failures["get"]:
            failures["get"] -= 1
            raise ConnectionResetError("the broker went away")
        return real_get(self, timeout)

    def execute(self, body, message_id=None):
        if failures["execute"]:
            failures["execute"] -= 1
            raise OSError("disk full")
        return real_execute(self, body, message_id)

    monkeypatch.setattr(PlanInbox, "get", get)
    monkeypatch.setattr(Agent, "execute", execute)
    plan = v2_plan({"a.sh": "echo once"}, [cmd("a.sh")], "plan-e")
    agent = Agent(settings)
    stop = threading.Event()
    with Broker(settings.broker_url) as broker:
        broker.publish(settings.input_queue, plan, plan["ID"])
        thread, out = serve(agent, stop)
        got = answers(broker, settings.result_queue, 1)
        stop.set()
        thread.join(TIMEOUT)
    assert got[0][0]["Result"][0]["Result"] == ["once"] and out.get("code") == 0
    steps = [t.split(" (")[0] for t in transitions(caplog.records)]
    assert steps[:6] == ["INIT -> WAIT_FOR_RUNNABLE", "WAIT_FOR_RUNNABLE -> INIT",
                         "INIT -> WAIT_FOR_RUNNABLE", "WAIT_FOR_RUNNABLE -> RUN_TASK",
                         "RUN_TASK -> INIT", "INIT -> WAIT_FOR_RUNNABLE"]
    assert "broker error: ConnectionResetError: the broker went away" in \
        transitions(caplog.records)[1]
    assert "OSError: disk full" in transitions(caplog.records)[4]
    assert steps[6:8] == ["WAIT_FOR_RUNNABLE -> RUN_TASK", "RUN_TASK -> WAIT_FOR_RUNNABLE"]


@pytest.mark.parametrize("code, exit_code, command_option", [
    (16, EXIT_STOPPED, None), (32, EXIT_POWEROFF, "poweroff_command"),
    (64, EXIT_REBOOT, "reboot_command")])
def test_exit_codes_answer_then_end_the_agent(settings, tmp_path, code, exit_code,
                                             command_option):
    ran = tmp_path / "system-command-ran"
    if command_option:
        setattr(settings, command_option,
                f"{sys.executable} -c \"open('{ran}', 'w')\"")
    plan = v2_plan({"s.sh": f"echo before {code}; exit {code}", "never.sh": "echo never"},
                   [cmd("s.sh"), cmd("never.sh")])
    after = v2_plan({"n.sh": "echo next"}, [cmd("n.sh")])
    with Broker(settings.broker_url) as broker:
        broker.publish(settings.input_queue, plan, plan["ID"])
        broker.publish(settings.input_queue, after, after["ID"])
        thread, out = serve(Agent(settings), threading.Event())
        thread.join(TIMEOUT)
        assert out.get("code") == exit_code
        got = answers(broker, settings.result_queue, 1)
        assert got == [({"IsException": False, "Result": [
            {"IsException": False, "Result": [f"before {code}"]}]}, plan["ID"])]
        assert ran.exists() is bool(command_option)
        # the next plan waits in the queue for the next agent
        assert answers(broker, settings.result_queue, 0) == []
        thread, out = serve(Agent(settings), stop := threading.Event())
        assert [m for _, m in answers(broker, settings.result_queue, 1)] == [after["ID"]]
        stop.set()
        thread.join(TIMEOUT)


def test_an_incomplete_plan_keeps_its_done_commands_and_is_answered_after_the_rerun(
        settings):
    sent: list = []
    publish = lambda plan_id, result: sent.append((plan_id, result))  # noqa: E731
    plan = incomplete_plan(128)
    agent = Agent(settings, publish=publish)
    outcome = agent.execute(plan)
    assert outcome.answer is None and outcome.action == "restart" and sent == []
    entry = agent.journal.get(plan["ID"])
    assert entry.rerun_pending and entry.next == 1 and entry.incompletes == 1
    assert entry.done == [{"IsException": False, "Result": ["first done"]}]

    restarted = Agent(settings, publish=publish)     # the plan is no interrupted one
    assert restarted.startup() == 0 and sent == []
    (pending,) = restarted.journal.reruns_pending()
    outcome = restarted.rerun(pending)
    expected = {"IsException": False, "Result": [
        {"IsException": False, "Result": ["first done"]},
        {"IsException": False, "Result": ["second run"]}]}
    assert outcome.answer == expected and outcome.action is None
    assert sent == [(plan["ID"], expected)]
    work = settings.work_dir
    assert (work / "first-runs").read_text() == "x\n"
    assert (work / "step-runs").read_text() == "run\nrun\n"
    assert Agent(settings, publish=publish).journal.reruns_pending() == []


def test_a_plan_incomplete_too_often_is_answered_with_an_error(settings):
    settings.max_incomplete = 2
    sent: list = []
    plan = v2_plan({"first.sh": FIRST, "again.sh": "echo again; exit 128"},
                   [cmd("first.sh"), cmd("again.sh")])
    agent = Agent(settings, publish=lambda i, r: sent.append((i, r)))
    outcomes = [agent.execute(plan)]
    while outcomes[-1].answer is None and len(outcomes) < 10:
        agent = Agent(settings, publish=lambda i, r: sent.append((i, r)))
        agent.startup()
        outcomes.append(agent.rerun(agent.journal.reruns_pending()[0]))
    assert len(outcomes) == 3 and [o.answer is None for o in outcomes] == [True, True, False]
    result = outcomes[-1].answer
    assert result["Result"][0] == {"IsException": False, "Result": ["first done"]}
    kind, message = result["Result"][1]["Result"]
    assert result["Result"][1]["IsException"] and kind == "TooManyIncompleteRuns"
    assert "3 times" in message and "max_incomplete = 2" in message
    assert outcomes[-1].action is None and sent == [(plan["ID"], result)]


def test_a_rerun_interrupted_by_a_crash_is_answered_as_interrupted(settings):
    sent: list = []
    agent = Agent(settings, publish=lambda i, r: sent.append((i, r)))
    plan = incomplete_plan(128)
    agent.execute(plan)
    agent.journal.resumed(plan["ID"])        # the re-run began, then the agent died
    again = Agent(settings, publish=lambda i, r: sent.append((i, r)))
    assert again.startup() == 1
    assert sent[0][0] == plan["ID"] and sent[0][1]["Result"][0] == "AgentInterrupted"
    assert again.journal.reruns_pending() == []


def test_log_lines_are_sent_in_batches_before_the_answer(settings):
    sent: list = []
    logs: list = []
    agent = Agent(settings, publish=lambda i, r: sent.append(("answer", i)),
                  publish_log=lambda i, lines, mid: logs.append((i, lines, mid)))
    script = "i=0\nwhile [ $i -lt 120 ]; do echo \"line $i\"; i=$((i+1)); done\n" \
             "echo oops >&2\nprintf 'no newline'\n"
    plan = v2_plan({"many.sh": script}, [cmd("many.sh")], "many")
    result = agent.process(plan)
    lines = [line for _, batch, _ in logs for line in batch]
    assert lines[:120] == [f"line {n}" for n in range(120)]
    assert sorted(lines[120:]) == ["no newline", "oops"]
    assert all(len(batch) <= 50 for _, batch, _ in logs)
    assert [mid for _, _, mid in logs] == [f"many-log-{n}" for n in range(1, len(logs) + 1)]
    assert result["Result"][0]["Result"][-1] == "no newline"     # the answer is unchanged
    assert len(result["Result"][0]["Result"]) == 121 and sent == [("answer", "many")]


# ============================================================ real agents (init.sh)

def render_user_data(broker_url: str, env: str, unit: str, hold: Path | None = None) -> str:
    """init.sh with the agent configuration inside, as prepare-user-data renders it
    (``hold``: the agent's hold file, see :mod:`fornace.agent.holds`)."""
    values = {"BROKER_URL": broker_url, "RABBITMQ_SSL": "False", "BROKER_QUEUE_TYPE": "classic",
              "RABBITMQ_INPUT_QUEUE": contract.agent_queue(env, "svc", unit),
              "RESULT_QUEUE": contract.results_queue(env), "INTERNAL_HOSTNAME": unit,
              "MURANO_SERVER_ADDRESS": "127.0.0.1"}
    config = (DATA / "templates/agent-config/Default.template").read_text()
    for key, value in values.items():
        config = config.replace(f"%{key}%", value)
    values["AGENT_CONFIG_BASE64"] = b64(config)
    script = (DATA / "init-scripts/init.sh").read_text()
    for key, value in values.items():
        script = script.replace(f"%{key}%", value)
    if hold is not None:    # the agents init.sh starts inherit it
        shebang, rest = script.split("\n", 1)
        script = f"{shebang}\nexport {HOLD_VARIABLE}='{hold}'\n{rest}"
    return script


class Unit:
    """One local cloud instance running init.sh, and the broker to talk to its agent."""

    def __init__(self, root: Path, url: str | None = None, hold: Path | None = None) -> None:
        self.url = url or f"filesystem://{root}/broker"
        self.hold = hold
        self.env = uuid.uuid4().hex[:10]
        self.stack = f"e{self.env}"
        self.stacks = LocalStacks(root / "cloud", stop_timeout=10)
        self.template = {"Resources": {"vm": {"Type": "AWS::EC2::Instance", "Properties": {
            "ImageId": "img",
            "UserData": render_user_data(self.url, self.env, "vm", hold)}}}}
        self.broker = Broker(self.url)
        self.results = contract.results_queue(self.env)
        self.answered: dict[str, list] = {}

    @property
    def sandbox(self) -> Path:
        return self.stacks.state_dir / self.stack / "vm"

    def start(self) -> None:
        self.stacks.apply(StackRequest(self.stack, self.template, {}))

    def info(self) -> dict:
        return self.stacks.instances(self.stack)["vm"]

    def send(self, plan: dict) -> None:
        self.broker.publish(contract.agent_queue(self.env, "svc", "vm"), plan, plan["ID"])

    def collect(self, timeout: float = 0.5) -> None:
        for body, message_id in self.broker.drain(self.results, timeout=timeout):
            if not contract.is_plan_log(body):
                self.answered.setdefault(message_id, []).append(body)

    def answer(self, plan_id: str, timeout: float = TIMEOUT) -> dict:
        assert wait_for(lambda: self.collect() or plan_id in self.answered, timeout=timeout), \
            f"no answer to {plan_id}; console:\n{self.console()[-3000:]}"
        return self.answered[plan_id][0]

    def agent_pids(self) -> list[int]:
        """The ``fornace agent`` processes of the instance (not init.sh, not scripts)."""
        token = self.info().get("token")
        pids = []
        for pid in instance_processes(token) if token else []:
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"fornace.cli" in argv and b"agent" in argv:
                pids.append(pid)
        return pids

    def agent_pid(self) -> int:
        assert wait_for(lambda: len(self.agent_pids()) == 1), self.console()[-3000:]
        return self.agent_pids()[0]

    def stopped(self) -> bool:
        """Nothing of the instance runs any more (its init.sh ended)."""
        info = self.info()
        return not info["running"] and not instance_processes(info["token"])

    def console(self) -> str:
        try:
            return (self.sandbox / "console.log").read_text(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        try:
            self.stacks.delete(self.stack)
        finally:
            self.broker.close()


@pytest.fixture
def unit(tmp_path):
    made = Unit(tmp_path)
    made.start()
    yield made
    made.close()


def in_order(text: str, *parts: str) -> bool:
    position = 0
    for part in parts:
        position = text.find(part, position)
        if position < 0:
            return False
        position += len(part)
    return True


def test_exit_0_answers_and_the_agent_goes_on(unit):
    pid = unit.agent_pid()
    plan = v2_plan({"ok.sh": "echo fine"}, [cmd("ok.sh")])
    unit.send(plan)
    assert unit.answer(plan["ID"])["Result"] == [{"IsException": False, "Result": ["fine"]}]
    assert unit.agent_pids() == [pid]


def test_exit_64_restarts_the_agent_process_after_answering(unit):
    pid = unit.agent_pid()
    boot_pid = unit.info()["pid"]
    plan = v2_plan({"r.sh": "echo rebooting; exit 64"}, [cmd("r.sh")])
    unit.send(plan)
    assert unit.answer(plan["ID"])["Result"] == [{"IsException": False,
                                                  "Result": ["rebooting"]}]
    assert wait_for(lambda: unit.agent_pids() not in ([], [pid])), unit.console()[-3000:]
    assert unit.info()["pid"] == boot_pid and unit.info()["running"]   # same instance
    assert not alive(pid)
    after = v2_plan({"n.sh": "echo after the reboot"}, [cmd("n.sh")])
    unit.send(after)                       # the new agent serves the unit
    assert unit.answer(after["ID"])["Result"][0]["Result"] == ["after the reboot"]
    assert in_order(unit.console(), "INIT -> WAIT_FOR_RUNNABLE", "RUN_TASK -> REBOOT",
                    "exited with code 3", "INIT -> WAIT_FOR_RUNNABLE",
                    "WAIT_FOR_RUNNABLE -> RUN_TASK", "RUN_TASK -> WAIT_FOR_RUNNABLE")
    assert len(unit.answered[plan["ID"]]) == 1


@pytest.mark.parametrize("code", [128, 192])
def test_an_incomplete_plan_runs_again_after_the_restart_and_is_answered_once(unit, code):
    pid = unit.agent_pid()
    plan = incomplete_plan(code)
    unit.send(plan)
    answer = unit.answer(plan["ID"])
    assert answer == {"IsException": False, "Result": [
        {"IsException": False, "Result": ["first done"]},
        {"IsException": False, "Result": ["second run"]}]}
    work = unit.sandbox / "work"
    assert (work / "step-runs").read_text() == "run\nrun\n"
    assert (work / "first-runs").read_text() == "x\n"
    assert unit.agent_pid() != pid                      # the agent was restarted
    assert in_order(unit.console(), "RUN_TASK -> REBOOT", "exited with code 3",
                    "is incomplete: running it again from command 1",
                    "RUN_TASK -> WAIT_FOR_RUNNABLE")
    unit.collect(timeout=1.0)
    assert len(unit.answered[plan["ID"]]) == 1


def test_exit_160_powers_off_and_runs_again_when_the_unit_starts(unit):
    unit.agent_pid()
    plan = incomplete_plan(160)
    unit.send(plan)
    assert wait_for(unit.stopped), unit.console()[-3000:]
    assert "exited with code 4" in unit.console()
    unit.collect(timeout=1.0)
    assert plan["ID"] not in unit.answered              # no answer for the incomplete run
    assert (unit.sandbox / "work" / "step-runs").read_text() == "run\n"
    unit.start()                                        # the unit is started again
    assert unit.answer(plan["ID"])["Result"] == [
        {"IsException": False, "Result": ["first done"]},
        {"IsException": False, "Result": ["second run"]}]
    assert (unit.sandbox / "work" / "first-runs").read_text() == "x\n"


@pytest.mark.parametrize("code, exit_code", [(16, EXIT_STOPPED), (32, EXIT_POWEROFF)])
def test_exit_16_and_32_answer_then_the_agent_is_gone(unit, code, exit_code):
    pid = unit.agent_pid()
    plan = v2_plan({"s.sh": f"echo bye {code}; exit {code}"}, [cmd("s.sh")])
    unit.send(plan)
    assert unit.answer(plan["ID"])["Result"] == [{"IsException": False,
                                                  "Result": [f"bye {code}"]}]
    assert wait_for(unit.stopped), unit.console()[-3000:]
    assert not alive(pid)
    assert f"the agent exited with code {exit_code}; it is not started again" in \
        unit.console()
    # init.sh itself ended (unit.stopped: no process of the instance is left),
    # so nothing can start the agent again: that is the barrier, not a pause
    assert unit.agent_pids() == []


def test_log_lines_reach_the_conductor_while_the_script_runs(unit):
    go = unit.sandbox / "work" / "go"
    received: list = []

    def on_log(plan_id: str, lines: list[str]) -> None:
        received.append((plan_id, lines))
        if "line 1" in lines:
            go.touch()                     # the script goes on only once this came
        raise RuntimeError("a failing log handler must not matter")

    script = ('echo "line 1"\ni=0\n'
              'while [ ! -f "$FORNACE_WORK_DIR/go" ] && [ $i -lt 900 ]; do\n'
              '    sleep 0.1; i=$((i+1))\ndone\n'
              'if [ -f "$FORNACE_WORK_DIR/go" ]; then echo "go seen"; else echo "no go"; fi\n')
    plan = v2_plan({"slow.sh": script}, [cmd("slow.sh")])
    agents = AmqpAgents(Broker(unit.url), unit.env, default_timeout=TIMEOUT, on_log=on_log)
    try:
        (reply,) = agents.run([PlanRequest("svc", "vm", "slow", plan)])
    finally:
        agents.broker.close()
    assert not reply.timed_out
    assert reply.result["Result"][0]["Result"] == ["line 1", "go seen"]
    assert received[0] == (plan["ID"], ["line 1"])
    assert [line for _, lines in received for line in lines] == ["line 1", "go seen"]
    assert json.dumps(received).count("line 1") == 1


def test_a_killed_agent_is_started_again_and_answers_from_its_journal(unit):
    """Regression: an agent killed -9 stayed dead (init.sh ended), so its unit's
    plans waited the whole agent_timeout; init.sh now starts a crashed agent
    again, as an init system would, and the journal answers a finished plan."""
    pid = unit.agent_pid()
    done = v2_plan({"d.sh": f"echo x >> {unit.sandbox}/runs\necho done once"}, [cmd("d.sh")])
    unit.send(done)
    assert unit.answer(done["ID"])["Result"][0]["Result"] == ["done once"]
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: unit.agent_pids() not in ([], [pid])), unit.console()[-3000:]
    assert "the agent crashed (code 137); starting it again" in unit.console()
    unit.send(done)                               # the same plan again: from the journal
    assert wait_for(lambda: unit.collect() or len(unit.answered.get(done["ID"], [])) == 2,
                    timeout=TIMEOUT)
    assert unit.answered[done["ID"]][1]["Result"][0]["Result"] == ["done once"]
    assert (unit.sandbox / "runs").read_text() == "x\n"   # the script ran once
    fresh = v2_plan({"n.sh": "echo new agent"}, [cmd("n.sh")])
    unit.send(fresh)
    assert unit.answer(fresh["ID"])["Result"][0]["Result"] == ["new agent"]


@pytest.fixture(params=["folder", "rabbitmq"])
def held_unit(request, tmp_path):
    """A unit whose agent can be held at a hold point (``unit.hold``), on either broker."""
    url = None if request.param == "folder" else request.getfixturevalue("amqp_vhost")
    made = Unit(tmp_path, url, hold=tmp_path / "hold")
    made.start()
    yield made
    made.close()


RUNS = 'echo ran >> "$FORNACE_WORK_DIR/runs"\n'


@contextlib.contextmanager
def conductor_waiting(unit: Unit, plan: dict) -> Iterator[list]:
    """The conductor's side: ``plan`` sent to the unit and its reply waited for,
    in a thread; the yielded list gets the reply."""
    replies: list = []
    agents = AmqpAgents(Broker(unit.url), unit.env, default_timeout=TIMEOUT)
    thread = threading.Thread(target=lambda: replies.extend(
        agents.run([PlanRequest("svc", "vm", "plan", plan)])), daemon=True)
    thread.start()
    try:
        yield replies
    finally:
        thread.join(TIMEOUT)
        agents.broker.close()


@pytest.mark.parametrize("script, expected", [
    (RUNS + "echo deployed\n",
     {"IsException": False, "Result": [{"IsException": False, "Result": ["deployed"]}]}),
    (RUNS + "echo broken >&2\nexit 3\n",
     {"IsException": False, "Result": [{"IsException": True, "Result": [
         "CommandFailed", "site.sh exited with code 3; stderr: broken"]}]}),
], ids=["success", "own-failure"])
def test_an_agent_killed_once_its_script_finished_answers_how_the_plan_ended(
        held_unit, script, expected):
    """Regression (issue 29): an agent SIGKILLed after its plan's script had
    finished but before it answered was started again and answered the plan
    ``AgentInterrupted``, so the unit was reported failed; the plan's end is now
    journaled first and the restarted agent sends that answer, without running
    the script again."""
    unit = held_unit
    assert unit.hold is not None
    pid = unit.agent_pid()
    unit.hold.write_text(COMMANDS_ENDED)     # the agent waits there while the file is
    plan = v2_plan({"site.sh": script}, [cmd("site.sh")])
    with conductor_waiting(unit, plan) as replies:
        reached = unit.hold.with_name(unit.hold.name + ".reached")
        wait_for(reached.exists, "the agent to end the plan's commands",
                 explain=lambda: unit.console()[-3000:])
        assert reached.read_text() == plan["ID"]
        os.kill(pid, signal.SIGKILL)                 # the script finished; no answer went
        unit.hold.unlink()                           # the next agent holds nowhere
        wait_for(lambda: replies, "the conductor's reply",
                 explain=lambda: unit.console()[-3000:])
    assert not alive(pid) and "the agent crashed (code 137)" in unit.console()
    [reply] = replies
    assert not reply.timed_out and reply.result == expected
    work = unit.sandbox / "work"
    assert (work / "runs").read_text() == "ran\n"   # the script ran once
    journal = [json.loads(line) for line in
               (work / "journal.jsonl").read_text().splitlines()]
    assert [r["event"] for r in journal if r["id"] == plan["ID"]].count("started") == 1
    # answered: its inputs (the arguments, which may hold passwords) are deleted
    folder = work / "plans" / safe_dir_name(plan["ID"])
    assert wait_for(lambda: not list(folder.glob("*.stdin.json"))), sorted(folder.iterdir())


def test_an_agent_killed_while_its_script_runs_answers_the_plan_interrupted(held_unit):
    """What has not ended is not guessed: a plan whose script was still running
    when its agent died is answered ``AgentInterrupted`` by the restarted agent
    (and the redelivered plan message too), never run a second time."""
    unit = held_unit
    pid = unit.agent_pid()
    work = unit.sandbox / "work"
    script = (RUNS + 'touch "$FORNACE_WORK_DIR/running"\ni=0\n'
              'while [ ! -f "$FORNACE_WORK_DIR/go" ] && [ $i -lt 900 ]; do\n'
              '    sleep 0.1; i=$((i+1))\ndone\necho finished late\n')
    plan = v2_plan({"slow.sh": script}, [cmd("slow.sh")])
    with conductor_waiting(unit, plan) as replies:
        try:
            wait_for((work / "running").exists, "the script to run",
                     explain=lambda: unit.console()[-3000:])
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: replies, "the conductor's reply",
                     explain=lambda: unit.console()[-3000:])
        finally:
            (work / "go").touch()              # the orphaned script ends
    [reply] = replies
    assert reply.result["IsException"] and reply.result["Result"][0] == "AgentInterrupted"
    assert (work / "runs").read_text() == "ran\n"
    fresh = v2_plan({"n.sh": "echo next"}, [cmd("n.sh")])   # after the redelivered one
    unit.send(fresh)
    assert unit.answer(fresh["ID"])["Result"][0]["Result"] == ["next"]
    assert (work / "runs").read_text() == "ran\n"          # the redelivery ran nothing
