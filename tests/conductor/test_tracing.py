"""A real job's trace: recorded by the conductor, sent before the result (contract 1.7)."""
from __future__ import annotations

import base64
import json
import uuid
import zlib
from pathlib import Path

import pytest

from fornace.common import contract
from fornace.common.broker import Broker
from fornace.conductor.daemon import Conductor, ConductorSettings
from fornace.conductor.dsl.pending import Action
from fornace.conductor.executors.simulator import SimulatedCloud
from fornace.conductor.jobs.tracing import JobTrace, encode
from fornace.conductor.session import Settings
from waiting import wait_for

DATA = Path(__file__).resolve().parents[2] / "data"
SECRET = "Secret-pass-1"


def model(env_id: str) -> dict:
    return {"id": env_id, "name": "traced", "services": [{
        "id": "svc1", "name": "site", "type": "linuxWebServer", "unitNamingPattern": "web#",
        "osImage": {"name": "debian"}, "adminPassword": SECRET,
        "units": [{"id": "u1", "name": "site_instance_0"},
                  {"id": "u2", "name": "site_instance_1"}]}]}


def run_job(trace: bool = True, action: str | None = None,
            deployed: bool = False) -> list[tuple[dict, str]]:
    """One deployment through a conductor with simulated agents: the results
    queue's messages of its task (body, message id) in their order, the result
    included (the in-memory broker is the process's: other tests' leftovers
    are left out)."""
    daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA,
                                         agents="simulator", trace=trace,
                                         engine=Settings(agent_timeout=3600)),
                       lambda task: SimulatedCloud().executors()[0])
    daemon.start()
    env_id = "t" + uuid.uuid4().hex[:8]
    found: list[tuple[dict, str]] = []
    try:
        assert daemon.wait_ready()
        with Broker("memory://") as broker:
            job = contract.job_section("j-" + env_id, action, {}) if action else None
            body = model(env_id)
            for unit in body["services"][0]["units"] if deployed else ():
                unit["status"] = {"state": "started", "local": "ok"}
            broker.publish(contract.TASKS, contract.task_body(body, "tok", "t1", job),
                           "task-" + env_id)

            def result() -> bool:
                found.extend(broker.drain(contract.RESULTS, timeout=0.1))
                return any(m == "task-" + env_id for _, m in found)
            wait_for(result, "the job's result", timeout=30)
    finally:
        daemon.shutdown()
    return [(body, message_id) for body, message_id in found
            if message_id.startswith("task-" + env_id)]


def trace_of(messages: list[tuple[dict, str]]) -> dict:
    event = next(contract.parse_job_event(b) for b, m in messages if m.endswith("-trace"))
    assert event.kind == "trace"
    raw = zlib.decompress(contract.trace_data(event.trace))
    assert len(raw) == event.trace["size"]
    return json.loads(raw)


def test_a_deployment_sends_its_trace_before_its_result_secrets_masked():
    messages = run_job()
    ids = [m for _, m in messages]
    trace_at = next(i for i, m in enumerate(ids) if m.endswith("-trace"))
    result_at = next(i for i, m in enumerate(ids) if "-" not in m[5:])
    assert trace_at < result_at
    document = trace_of(messages)
    assert document["action"] == "deploy" and document["truncated"] is False
    events = [e for r in document["rounds"] for e in r["events"]]
    rules = [e for e in events if e["e"] == "rule"]
    assert rules and all(":" in e["at"] and e["pass"] >= 1 for e in rules)
    assert any(e["id"] == "u1" for e in rules)                # which object it matched
    # named by hostname once it has one, and why: what the match's filters read
    assert {e.get("host") for e in rules if e["id"] == "u1"} >= {None, "web1"}
    named = next(e for e in rules if e["at"] == "Common.xml:5" and e["id"] == "u1")
    assert named["cause"] == ["state.hostname: absent"] and "host" not in named
    created = next(e for e in rules if e["at"] == "Common.xml:37" and e["id"] == "u1")
    assert created["host"] == "web1"
    assert "services.0.temp.instance.image: 'linux'" in created["cause"]
    sets = [e for e in events if e["e"] == "set"]
    assert sets and all(e["path"] for e in sets)
    queued = {e["n"]: e for e in events if e["e"] == "queued"}
    ended = {e["n"]: e["outcome"] for e in events if e["e"] == "ended"}
    assert queued and set(ended) == set(queued) and set(ended.values()) == {"success"}
    tasks = [e for e in events if e["e"] == "task"]
    assert tasks and all(e["n"] in queued and e["change"] for e in tasks)
    assert len(document["rounds"]) >= 2
    assert SECRET not in json.dumps(document)


def test_no_trace_is_sent_when_tracing_is_off():
    messages = run_job(trace=False)
    assert not [m for _, m in messages if m.endswith("-trace")]


def test_written_values_are_masked_by_name_and_by_value_and_cut_when_long():
    trace = JobTrace({"hunter2-secret"})
    trace.round_started(1)
    trace.changed("r1", "w.xml:3", "services[0].adminPassword", "anything")
    trace.changed("r1", "w.xml:4", "services[0].note", "says hunter2-secret here")
    trace.changed("r1", "w.xml:5", "services[0].big", "x" * 5000)
    values = [e["value"] for e in trace.rounds[0]["events"]]
    assert values[0] == "***" and values[1] == "says *** here"
    assert len(values[2]) <= 160 and values[2].endswith("\u2026")


def test_a_trace_past_its_cap_stops_with_a_note():
    trace = JobTrace(max_bytes=2000)
    for number in range(1, 50):
        trace.round_started(number)
        trace.action_queued(Action(kind="send-command", where="w.xml:9", rule_id="deploy",
                                   template="Deploy", unit=f"u{number}"))
    document = trace.document("e1", "j1", "deploy")
    assert document["truncated"] is True and "trace truncated" in document["note"]
    assert len(json.dumps(document)) < 2600
    assert encode(document)["size"] == len(json.dumps(document, separators=(",", ":")))


def test_trace_events_are_checked_strictly():
    good = encode({"rounds": []})
    assert contract.parse_job_event(contract.trace_event_body("e1", "j1", good)).trace == good
    body = {"environment_id": "e1", "job_id": "j1", "kind": "trace"}
    for trace, error in (
            (None, "field 'trace' is missing"),
            ({**good, "encoding": "gzip"}, "field 'trace.encoding' must be zlib\\+base64"),
            ({k: v for k, v in good.items() if k != "data"}, "field 'trace.data' is missing"),
            ({**good, "size": "12"}, "field 'trace.size' must be a number"),
            ({**good, "size": 1 << 40}, "field 'trace.size' must be between")):
        with pytest.raises(contract.ContractError, match=error):
            contract.parse_job_event({**body, **({} if trace is None else {"trace": trace})})
    with pytest.raises(contract.ContractError, match="field 'trace.data' is not base64"):
        contract.trace_data({**good, "data": "not base64!"})
    assert base64.b64decode(good["data"])   # what trace_data gives back
    assert contract.is_job_event({**body, "trace": good})


def test_an_action_without_workflows_traces_the_operations_it_ran():
    document = trace_of(run_job(action="check", deployed=True))
    events = [e for entry in document["rounds"] for e in entry["events"]]
    sent = [e for e in events if e["e"] == "queued"]
    assert {e["unit"] for e in sent} == {"u1", "u2"}, events
    assert {(e["kind"], e["operation"], e["reason"]) for e in sent} == {
        ("operation", "check", "check")}
    numbers = {e["n"] for e in sent}
    assert {e["n"] for e in events if e["e"] == "task"} == numbers
    assert {e["n"] for e in events if e["e"] == "ended"} == numbers
    assert document["action"] == "check"


def test_a_match_cause_is_bounded_masked_and_absent_from_old_records():
    from fornace.cli.client.trace import trace_lines
    from fornace.common.cursor import Cursor
    from fornace.conductor.dsl.query import compile_query
    from fornace.conductor.dsl.xmlload import Node

    trace = JobTrace(secrets={SECRET})
    unit = {"id": "u1", "state": {"hostname": "kv-1", "token": "t0k", "note": SECRET},
            "adminPassword": SECRET}
    root = Cursor({"services": [{"type": "kv", "units": [unit]}]})
    at = Cursor(unit, 0, Cursor([unit], "units", Cursor(root.value["services"][0], 0,
                                                        Cursor(root.value["services"],
                                                               "services", root))))
    clauses = " and ".join(f"not @.f{n}" for n in range(20))
    query = compile_query("$.services[?(@.type == 'kv')].units[?(@.state.token and "
                          f"@.adminPassword and @.state.note and {clauses})]")
    trace.rule_matched(Node("rule", {"desc": "kv units"}, "/x/Kv.xml", 3), "line3", at, query)
    event = trace.rounds[0]["events"][0]
    assert event["host"] == "kv-1"
    assert event["cause"][:4] == ["services.0.type: 'kv'", "state.token: '***'",
                                  "adminPassword: '***'", "state.note: '***'"]
    assert len(event["cause"]) == 12 and event["cause"][-1] == "f7: absent"   # bounded
    assert SECRET not in json.dumps(trace.rounds)
    lines = trace_lines({"job_id": "j", "action": "deploy", "rounds": trace.rounds})
    assert lines[2] == "  pass 1: rule line3 at Kv.xml:3 matched services.0.units.0 (u1, host kv-1)  -- kv units"
    assert lines[3].startswith("      because services.0.type: 'kv', state.token: '***'")
    # a trace kept before hosts and causes were recorded reads as it did
    old = {"job_id": "j", "action": "deploy", "rounds": [{"round": 1, "events": [
        {"e": "rule", "pass": 1, "rule": "line3", "at": "Kv.xml:3", "object": "services.0",
         "id": "s1"},
        {"e": "queued", "n": 1, "kind": "send-command", "template": "T", "unit": "u1"}]}]}
    assert trace_lines(old)[2:] == [
        "  pass 1: rule line3 at Kv.xml:3 matched services.0 (s1)",
        "    queued #1 send-command T on unit u1"]
