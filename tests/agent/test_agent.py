"""The unit agent: plans run through the core directly, then over the broker."""
from __future__ import annotations

import base64
import json
import os
import stat
import sys
import threading
import uuid
from pathlib import Path

import pytest

from fornace.agent.config import AgentSettings
from fornace.agent.service import EXIT_REBOOT, Agent
from fornace.cli.main import build_conf
from fornace.common import contract
from fornace.common.broker import Broker
from waiting import wait_for


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def v2_plan(scripts: dict[str, str], commands: list, reboot: int = 0,
            plan_id: str | None = None) -> dict:
    return {"FormatVersion": "2.0", "Scripts": [b64(t) for t in scripts.values()],
            "ScriptNames": list(scripts), "Commands": commands,
            "RebootOnCompletion": reboot, "ID": plan_id or uuid.uuid4().hex}


def cmd(name: str, **arguments) -> dict:
    return {"Name": name, "Arguments": arguments}


class Sent(list):
    def __call__(self, plan_id, result):
        self.append((plan_id, json.loads(json.dumps(result))))


@pytest.fixture
def make_agent(tmp_path):
    def make(**options) -> tuple[Agent, Sent]:
        sent = Sent()
        options.setdefault("work_dir", tmp_path / "work")
        return Agent(AgentSettings(**options), publish=sent), sent
    return make


# ============================================================ the core

def test_v2_shell_and_python_scripts_get_their_arguments(make_agent):
    agent, sent = make_agent()
    plan = v2_plan({
        "hello.sh": 'echo "hello $who from $(basename "$PWD")"\necho "port=$port"\n',
        "sum.py": "import json, os, sys\nargs = json.load(sys.stdin)\n"
                  "print(args['a'] + args['b'])\nprint(os.environ['flag'], os.environ['b'])\n",
    }, [cmd("hello.sh", who="world", port=8080), cmd("sum.py", a=2, b=3, flag=True)])
    result = agent.process(plan)
    assert result == {"IsException": False, "Result": [
        {"IsException": False, "Result": ["hello world from work", "port=8080"]},
        {"IsException": False, "Result": ["5", "true 3"]}]}
    assert sent == [(plan["ID"], result)]


def test_the_example_linux_plan_runs_as_built_by_the_conductor(make_agent, tmp_path,
                                                               monkeypatch):
    import signal
    import urllib.request

    from apikit import free_port
    from fornace.conductor.plans import build_plan
    from fornace.common.resources import BUILTIN_DATA
    from fornace.conductor.templates import TemplateStore

    monkeypatch.setenv("FORNACE_INSTANCE_ADDRESS", "127.0.0.1")
    port = free_port()
    store = TemplateStore(BUILTIN_DATA)
    agent, _ = make_agent()
    pid_file = tmp_path / "work" / "site-server.pid"
    pids = []
    try:
        for title in ("<T1>", "T2"):   # the second deployment replaces the first server
            plan = build_plan(store, "Linux/DeployStaticSite", {"port": str(port),
                                                                 "title": title})
            result = agent.process(plan)
            assert result["Result"][0]["IsException"] is False, result
            assert result["Result"][0]["Result"] == [f"serving http://127.0.0.1:{port}/"]
            pids.append(json.loads(pid_file.read_text())["pid"])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
                text = page.read().decode()
            assert ("&lt;T1&gt;" if title == "<T1>" else "<h1>T2</h1>") in text
        first = Path(f"/proc/{pids[0]}/cmdline")
        assert pids[0] != pids[1]
        assert not first.exists() or b"http.server" not in first.read_bytes()
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def test_old_plan_folders_are_removed(make_agent, tmp_path):
    agent, _ = make_agent(keep_plans=2)
    ids = []
    for n in range(4):
        plan = v2_plan({"a.sh": f"echo {n}"}, [cmd("a.sh")], plan_id=f"p{n}")
        assert agent.process(plan)["Result"][0]["Result"] == [str(n)]
        ids.append(plan["ID"])
    left = sorted(p.name.split("-")[0] for p in (tmp_path / "work" / "plans").iterdir())
    assert left == ["p2", "p3"]
    assert agent.journal.get("p0").result is not None   # the journal still answers p0


def test_the_journal_is_compacted_at_start_keeping_unsent_answers(make_agent, tmp_path):
    agent, _ = make_agent()
    agent.journal.result("early", {"IsException": False, "Result": []})   # never sent
    for n in range(7):
        agent.process(v2_plan({"a.sh": f"echo {n}"}, [cmd("a.sh")], plan_id=f"p{n}"))
    again, _ = make_agent(journal_keep=3)
    kept = {"early", "p4", "p5", "p6"}
    assert set(again.journal.entries) == kept
    lines = (tmp_path / "work" / "journal.jsonl").read_text().splitlines()
    assert {json.loads(line)["id"] for line in lines} == kept
    third, _ = make_agent(journal_keep=3)     # reading the compacted file gives the same
    assert set(third.journal.entries) == kept
    assert third.journal.get("p5").sent and not third.journal.get("early").sent
    assert [e.id for e in third.journal.unsent()] == ["early"]


def test_a_failing_command_stops_the_plan(make_agent, tmp_path):
    marker = tmp_path / "ran"
    agent, sent = make_agent()
    plan = v2_plan({"ok.sh": "echo one\n", "bad.sh": "echo partial\necho broken >&2\nexit 7\n",
                    "after.sh": f"touch {marker}\n"},
                   [cmd("ok.sh"), cmd("bad.sh"), cmd("after.sh")])
    result = agent.process(plan)
    assert result["IsException"] is False
    assert len(result["Result"]) == 2
    assert result["Result"][0] == {"IsException": False, "Result": ["one"]}
    failed = result["Result"][1]
    assert failed["IsException"] is True
    kind, message = failed["Result"]
    assert kind == "CommandFailed"
    assert "exit" in message and "7" in message and "broken" in message
    assert not marker.exists()
    # what the conductor makes of it: an 'inner' error
    from fornace.conductor.executors.base import PlanReply
    from fornace.conductor.plans import read_reply
    ok, errors = read_reply(PlanReply(result), None)
    assert not ok and errors[0]["type"] == "inner" and errors[0]["messages"][0] == kind


@pytest.mark.parametrize("body, kind", [
    ("{not json", "MalformedPlan"),
    (b"\xff\xfe", "MalformedPlan"),
    ([1, 2], "MalformedPlan"),
    ({"Scripts": ["%%%not base64"], "Commands": []}, "MalformedPlan"),
    ({"FormatVersion": "9.1", "Scripts": [], "Commands": []}, "UnsupportedFormatVersion"),
    ({"FormatVersion": "2.0", "Scripts": [b64("x")], "Commands": []}, "MalformedPlan"),
    ({"FormatVersion": "2.0", "Scripts": [b64("x")], "ScriptNames": ["../evil.sh"],
      "Commands": []}, "MalformedPlan"),
    ({"FormatVersion": "2.0", "Scripts": [], "ScriptNames": [],
      "Commands": [cmd("missing.sh")]}, "MalformedPlan"),
    ({"Commands": "nope"}, "MalformedPlan"),
    ({"Commands": [], "RebootOnCompletion": 5}, "MalformedPlan"),
])
def test_a_plan_that_cannot_run_is_a_top_level_exception(make_agent, body, kind):
    agent, sent = make_agent()
    result = agent.process(body, message_id="m-1")
    assert result["IsException"] is True
    assert result["Result"][0] == kind and isinstance(result["Result"][1], str)
    assert sent == [("m-1", result)]
    contract.parse_plan_result(result)


def test_powershell_missing_is_a_clear_command_exception(make_agent, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    agent, _ = make_agent(powershell="pwsh-that-is-not-here", shell="/bin/sh")
    v2 = agent.process(v2_plan({"a.ps1": "Write-Output 1"}, [cmd("a.ps1")]))
    old = agent.process({"Scripts": [b64("function Do-It { 'x' }")],
                         "Commands": [cmd("Do-It", Name="v")], "RebootOnCompletion": 0,
                         "ID": "old-style"})
    for result in (v2, old):
        assert result["IsException"] is False
        assert result["Result"] == [{"IsException": True, "Result": [
            "PowerShellNotInstalled", "PowerShell is not installed on this unit"]}]


def test_a_0_2_plan_calls_the_function_through_powershell(make_agent, tmp_path):
    """A stand-in pwsh shows what a real one is given: scripts, function, arguments."""
    fake = tmp_path / "fake-pwsh"
    fake.write_text("#!/bin/sh\necho \"function=$FORNACE_FUNCTION\"\n"
                    "for s in $(echo \"$FORNACE_SCRIPTS\" | tr ':' ' '); do head -c 14 \"$s\"; "
                    "echo; done\ncat\necho\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    agent, _ = make_agent(powershell=str(fake))
    result = agent.process({"Scripts": [b64("function Deploy-It {}"), b64("function Other {}")],
                            "Commands": [cmd("Deploy-It", URL="http://x", Count=2)],
                            "RebootOnCompletion": 0, "ID": "ps-1"})
    assert result["Result"][0] == {"IsException": False, "Result": [
        "function=Deploy-It", "function Deplo", "function Other", json.dumps(
            {"URL": "http://x", "Count": 2})]}


def test_a_hung_command_is_killed_after_the_timeout(make_agent):
    agent, _ = make_agent(command_timeout=0.5)
    result = agent.process(v2_plan({"hang.sh": "echo started\nsleep 30\n"}, [cmd("hang.sh")]))
    kind, message = result["Result"][0]["Result"]
    assert result["Result"][0]["IsException"] and kind == "TimeoutError"
    assert "0.5 seconds" in message


def test_a_command_timeout_of_zero_is_no_limit(make_agent):
    """Regression: command_timeout=0 in code ("no limit") killed every command at once."""
    agent, _ = make_agent(command_timeout=0)
    result = agent.process(v2_plan({"nap.sh": "sleep 0.3\necho rested\n"}, [cmd("nap.sh")]))
    assert result["Result"][0] == {"IsException": False, "Result": ["rested"]}


def test_a_background_daemon_does_not_hold_the_agent(make_agent):
    agent, _ = make_agent(command_timeout=10)
    result = agent.process(v2_plan({"d.sh": "sleep 3 &\necho launched\n"}, [cmd("d.sh")]))
    assert result["Result"][0] == {"IsException": False, "Result": ["launched"]}


def test_the_same_plan_twice_runs_once_and_is_answered_twice(make_agent, tmp_path):
    counter = tmp_path / "count"
    plan = v2_plan({"count.sh": f"echo x >> {counter}\necho done\n"}, [cmd("count.sh")])
    agent, sent = make_agent()
    first = agent.process(plan)
    second = agent.process(json.dumps(plan).encode())
    # and after a restart of the agent, from the journal file
    again, sent_later = make_agent()
    third = again.process(plan)
    assert counter.read_text().count("x") == 1
    assert first == second == third
    assert [s[0] for s in sent + sent_later] == [plan["ID"]] * 3


SECRET = "Pa55-w0rd-xyz"


def files_holding(folder: Path, text: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and text.encode() in p.read_bytes()
            and p.name != "journal.jsonl"]


def test_a_plans_inputs_are_deleted_once_it_is_answered(make_agent, tmp_path):
    """Regression: arguments holding passwords stayed in the unit's work folder."""
    agent, _ = make_agent()
    plan = v2_plan({"use.sh": 'test -n "$password" && echo used\n'},
                   [cmd("use.sh", password=SECRET), cmd("use.sh", password=SECRET)])
    assert agent.process(plan)["Result"][0]["Result"] == ["used"]
    folder = agent.runner.plan_folder(plan["ID"])
    assert (folder / "use.sh").exists() and (folder / "000.stdout").exists()
    assert list(folder.glob("*.stdin.json")) == []
    assert files_holding(tmp_path / "work", SECRET) == []


def test_an_incomplete_plan_keeps_its_inputs_until_its_rerun_is_answered(make_agent):
    agent, _ = make_agent()
    plan = v2_plan({"twice.sh": 'if [ -e again ]; then echo done; else touch again; '
                                'exit 128; fi\n'}, [cmd("twice.sh", password=SECRET)])
    outcome = agent.execute(plan)
    assert outcome.answer is None and outcome.action == "restart"
    folder = agent.runner.plan_folder(plan["ID"])
    assert (folder / "plan.json").exists()      # needed to run it again
    assert agent.execute(plan).answer["Result"][0]["Result"] == ["done"]
    assert files_holding(folder, SECRET) == []


def test_keep_plan_inputs_keeps_them_owner_only(make_agent, tmp_path):
    agent, _ = make_agent(keep_plan_inputs=True)
    plan = v2_plan({"use.sh": "cat >/dev/null\n"}, [cmd("use.sh", password=SECRET)])
    agent.process(plan)
    [kept] = agent.runner.plan_folder(plan["ID"]).glob("*.stdin.json")
    assert SECRET in kept.read_text() and stat.S_IMODE(kept.stat().st_mode) == 0o600


def test_a_plan_interrupted_by_a_crash_is_not_run_again(make_agent, tmp_path):
    agent, _ = make_agent()
    agent.journal.started("crashed")
    again, sent = make_agent()
    result = again.process(v2_plan({"a.sh": "echo hi"}, [cmd("a.sh")], plan_id="crashed"))
    assert result["IsException"] and result["Result"][0] == "AgentInterrupted"
    assert sent[0][0] == "crashed"


@pytest.mark.parametrize("reboot, fails, expected", [
    (0, False, False), (1, False, True), (1, True, False), (2, True, True)])
def test_reboot_requests_are_journaled_and_answered_after_the_restart(
        make_agent, reboot, fails, expected):
    agent, sent = make_agent()
    plan = v2_plan({"s.sh": "exit 1" if fails else "echo ok"}, [cmd("s.sh")], reboot=reboot)
    result = agent.process(plan)
    assert (agent.reboot_requested == plan["ID"]) is expected
    assert agent.journal.get(plan["ID"]).result == result   # journaled either way
    if not expected:
        assert sent == [(plan["ID"], result)]
        return
    assert sent == []                                        # sent after the restart
    assert [e.id for e in agent.journal.reboots_pending()] == [plan["ID"]]
    restarted, sent_after = make_agent()
    restarted.startup()
    assert sent_after == [(plan["ID"], result)]
    assert restarted.journal.reboots_pending() == []
    restarted.startup()                                      # nothing twice
    assert len(sent_after) == 1


def test_a_torn_journal_line_is_skipped(make_agent, tmp_path):
    agent, _ = make_agent()
    agent.process(v2_plan({"a.sh": "echo a"}, [cmd("a.sh")], plan_id="p1"))
    with open(agent.settings.journal, "a") as handle:
        handle.write('{"event": "result", "id": "p2", "resu')
    again, _ = make_agent()
    assert again.journal.get("p1").sent and again.journal.get("p2") is None


def test_the_config_file_written_by_init_sh_is_read(tmp_path):
    template = (Path(__file__).resolve().parents[2] / "data/templates/agent-config/Default.template")
    text = template.read_text()
    cluster = "amqp://u:p@h1:5672//;amqp://u:p@h2:5672//"   # a failover URL, as it comes
    for key, value in {"BROKER_URL": cluster, "RABBITMQ_SSL": "False",
                       "BROKER_QUEUE_TYPE": "quorum", "RABBITMQ_INPUT_QUEUE": "eenv-svc-unit",
                       "RESULT_QUEUE": "-execution-results-eenv"}.items():
        text = text.replace(f"%{key}%", value)
    path = tmp_path / "agent.conf"
    path.write_text(text + f"\n[agent]\nwork_dir = {tmp_path / 'w'}\ncommand_timeout = 60\n")
    conf = build_conf()
    conf(["--config-file", str(path), "agent"], project="fornace", prog="fornace")
    settings = AgentSettings.from_conf(conf)
    assert settings.broker_url == cluster and settings.broker_queue_type == "quorum"
    assert Agent(settings).broker().queue_type == "quorum"
    assert settings.input_queue == "eenv-svc-unit"
    assert settings.result_queue == "-execution-results-eenv"
    assert settings.command_timeout == 60 and settings.journal == tmp_path / "w/journal.jsonl"
    assert settings.broker_ssl is False


def test_the_cli_refuses_a_config_without_queues(tmp_path, capsys):
    from fornace.cli.main import main
    path = tmp_path / "agent.conf"
    path.write_text(f"[agent]\nwork_dir = {tmp_path / 'w'}\n")
    assert main(["--config-file", str(path), "agent"]) == 2
    assert "input_queue" in capsys.readouterr().err


# ============================================================ over the broker

@pytest.fixture(params=["memory", "rabbitmq"])
def broker_url(request) -> str:
    return "memory://" if request.param == "memory" else request.getfixturevalue("amqp_vhost")


def _queues():
    env = uuid.uuid4().hex[:10]
    return contract.agent_queue(env, "svc", "unit"), contract.results_queue(env)


def _answers(broker: Broker, queue: str, count: int = 0) -> list:
    """The answers on a results queue, in order (log line messages left out):
    those there now, once ``count`` of them came."""
    got: list = []

    def came() -> bool:
        got.extend((body, mid) for body, mid in broker.drain(queue, timeout=0.3)
                   if not contract.is_plan_log(body))
        return len(got) >= count
    wait_for(came, f"{count} answers on {queue}", explain=lambda: f"got {got}")
    return got


def _serve(agent: Agent, stop: threading.Event) -> tuple[threading.Thread, dict]:
    out: dict = {}
    ready = threading.Event()
    thread = threading.Thread(target=lambda: out.setdefault("code", agent.serve(stop, ready)),
                              daemon=True)
    thread.start()
    assert ready.wait(15), "the agent did not subscribe"
    return thread, out


def test_plans_through_the_broker_in_order(broker_url, tmp_path):
    input_queue, results = _queues()
    settings = AgentSettings(work_dir=tmp_path / "w", broker_url=broker_url,
                             input_queue=input_queue, result_queue=results)
    plans = [v2_plan({"a.py": f"print('plan {n}')"}, [cmd("a.py")]) for n in range(3)]
    plans.insert(1, {"ID": "broken", "FormatVersion": "7"})
    with Broker(broker_url) as sender:
        try:
            for plan in plans:
                sender.publish(input_queue, plan, plan["ID"])
            stop = threading.Event()
            thread, out = _serve(Agent(settings), stop)
            got = _answers(sender, results, count=len(plans))
            stop.set()
            thread.join(15)
            assert out.get("code") == 0
            assert [message_id for _, message_id in got] == [p["ID"] for p in plans]
            assert got[0][0]["Result"][0]["Result"] == ["plan 0"]
            assert got[1][0]["IsException"] and got[1][0]["Result"][0] == \
                "UnsupportedFormatVersion"
            assert got[3][0]["Result"][0]["Result"] == ["plan 2"]
            assert sender.drain(input_queue, timeout=0.2) == []   # every plan acked
        finally:
            sender.delete(input_queue)
            sender.delete(results)


def test_a_plan_message_that_is_not_json_is_answered(broker_url, tmp_path):
    import kombu

    input_queue, results = _queues()
    settings = AgentSettings(work_dir=tmp_path / "w", broker_url=broker_url,
                             input_queue=input_queue, result_queue=results)
    with Broker(broker_url) as sender:
        try:
            sender.publish(input_queue, {"declare": "the queue"}, "first")
            with sender.connection() as conn:
                kombu.Producer(conn).publish("{not json", exchange="", routing_key=input_queue,
                                             serializer=None, content_type="text/plain",
                                             content_encoding="utf-8", message_id="garbage")
            stop = threading.Event()
            thread, _ = _serve(Agent(settings), stop)
            got = dict((message_id, body) for body, message_id
                       in _answers(sender, results, count=2))
            stop.set()
            thread.join(15)
            assert got["garbage"]["IsException"] is True
            assert got["garbage"]["Result"][0] == "MalformedPlan"
        finally:
            sender.delete(input_queue)
            sender.delete(results)


def test_a_reboot_plan_stops_the_agent_which_answers_after_restart(broker_url, tmp_path):
    input_queue, results = _queues()
    settings = AgentSettings(work_dir=tmp_path / "w", broker_url=broker_url,
                             input_queue=input_queue, result_queue=results,
                             reboot_command=f"{sys.executable} -c \"open('{tmp_path}/rb','w')\"")
    reboot = v2_plan({"r.sh": "echo rebooting"}, [cmd("r.sh")], reboot=1)
    after = v2_plan({"n.sh": "echo next"}, [cmd("n.sh")])
    with Broker(broker_url) as sender:
        try:
            sender.publish(input_queue, reboot, reboot["ID"])
            sender.publish(input_queue, after, after["ID"])
            stop = threading.Event()
            thread, out = _serve(Agent(settings), stop)
            thread.join(20)
            assert out.get("code") == EXIT_REBOOT
            assert (tmp_path / "rb").exists()                 # the reboot command ran
            assert _answers(sender, results) == []   # no answer before reboot
            stop = threading.Event()
            thread, out = _serve(Agent(settings), stop)       # the restart
            got = _answers(sender, results, count=2)
            stop.set()
            thread.join(15)
            assert [m for _, m in got] == [reboot["ID"], after["ID"]]
            assert got[0][0]["Result"][0]["Result"] == ["rebooting"]
            assert got[1][0]["Result"][0]["Result"] == ["next"]
        finally:
            sender.delete(input_queue)
            sender.delete(results)


def test_a_plan_nested_too_deeply_is_answered_as_malformed(make_agent):
    """Regression: a deeply nested plan body ended in a RecursionError."""
    agent, sent = make_agent()
    body = '{"ID": "deep", "Commands": ' + "[" * 100000 + "]" * 100000 + "}"
    result = agent.process(body, "deep")
    assert result["IsException"] and result["Result"][0] == "MalformedPlan"
    assert "nested" in result["Result"][1]


def test_an_answer_whose_sent_record_was_lost_is_sent_again_at_start(make_agent, tmp_path,
                                                                      monkeypatch):
    """``sent`` is not fsynced: lost with the machine, the answer goes out once more
    (the conductor drops an answer it no longer waits for); every record before it
    is durable, so the plan is not run again."""
    from fornace.agent import journal as journal_module

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(journal_module.os, "fsync",
                        lambda fd: (synced.append(fd), real_fsync(fd))[1])
    agent, sent = make_agent()
    plan = v2_plan({"a.sh": "echo once >> ../ran\necho done\n"}, [cmd("a.sh")])
    result = agent.process(plan)
    path = agent.journal.path
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["event"] for r in records] == ["started", "result", "sent"]
    assert len(synced) == 2                       # started and result, not sent
    agent.close()
    # the machine died before the sent record reached the disk
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()[:2]))
    again, resent = make_agent()
    assert again.startup() == 1
    assert resent == [(plan["ID"], result)]
    assert again.process(plan) == result          # redelivered: answered, not run
    assert (tmp_path / "ran").read_text() == "once\n"


def test_a_command_ending_at_once_is_answered_with_its_code_and_lines(make_agent):
    """The runner waits on the child's end (pidfd), with and without a line sink."""
    agent, _ = make_agent(command_timeout=30)
    for _ in range(3):
        result = agent.process(v2_plan({"q.sh": "echo a\necho b >&2\nexit 0\n",
                                        "f.sh": "echo no >&2\nexit 7\n"},
                                       [cmd("q.sh"), cmd("f.sh")]))
        assert result["Result"][0] == {"IsException": False, "Result": ["a"]}
        assert result["Result"][1]["IsException"]
        assert "exited with code 7" in result["Result"][1]["Result"][1]


def test_the_runner_waits_without_pidfd_too(make_agent, monkeypatch):
    """Where the kernel has no pidfd the runner falls back to Popen.wait."""
    from fornace.agent import runner

    def no_pidfd(pid):
        raise OSError("no pidfd here")

    monkeypatch.setattr(runner.os, "pidfd_open", no_pidfd, raising=False)
    agent, _ = make_agent(command_timeout=0.5)
    ok = agent.process(v2_plan({"q.sh": "echo fine\n"}, [cmd("q.sh")]))
    assert ok["Result"][0] == {"IsException": False, "Result": ["fine"]}
    hung = agent.process(v2_plan({"h.sh": "sleep 30\n"}, [cmd("h.sh")]))
    assert hung["Result"][0]["Result"][0] == "TimeoutError"
