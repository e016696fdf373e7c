"""Tests of fornace.common.contract: queue names, message bodies and their parsing."""
from __future__ import annotations

import json

import pytest

from fornace.common import contract
from fornace.common.contract import (ContractError, Report, Task, agent_queue, deletion_task_body,
                                parse_plan_result, parse_report, parse_result, parse_task,
                                report_body, result_body, results_queue, task_body)


def model() -> dict:
    return {
        "id": "ENV1", "name": "MyDC", "temp": {"x": 1},
        "services": [
            {"id": "SvcA", "type": "webServer", "temp": {"y": 2}, "adminPassword": "S3cr3t!",
             "units": [{"id": "uA1", "temp": {"z": 3}, "state": {"hostname": "h1"}},
                       {"id": "uA2"}]},
            {"id": "SvcB", "units": []},
        ],
    }


# ------------------------------------------------------------------ names

def test_queue_names_follow_0_2():
    assert contract.TASKS == "tasks"
    assert contract.RESULTS == "task-results"
    assert contract.REPORTS == "task-reports"
    assert agent_queue("ENV1", "SvcA", "uA1") == "eenv1-svca-ua1"
    assert results_queue("ENV1") == "-execution-results-eenv1"


def test_hosts_uses_the_contract_names():
    from fornace.conductor.dsl.functions import hosts
    assert hosts.agent_queue is contract.agent_queue
    assert hosts.result_queue is contract.results_queue


# ----------------------------------------------------------------- bodies

def test_task_body_is_the_model_with_token_and_tenant():
    original = model()
    body = task_body(original, "tok-123", "tenant-1")
    assert body["token"] == "tok-123" and body["tenant_id"] == "tenant-1"
    assert {k: v for k, v in body.items() if k not in ("token", "tenant_id")} == original
    assert "token" not in original  # the caller's model is not touched
    assert json.loads(json.dumps(body)) == body


def test_task_body_allows_no_token():
    assert task_body({"id": "E"}, None, "t")["token"] is None


def test_task_body_rejects_a_model_without_id():
    with pytest.raises(ContractError, match="'id'"):
        task_body({"name": "x"}, "tok", "t")


def test_deletion_task_body():
    body = deletion_task_body("E1", "MyDC", "tok-1", "ten")
    assert body == {"id": "E1", "name": "MyDC", "services": {}, "deleted": True,
                    "token": "tok-1", "tenant_id": "ten"}
    task = parse_task(body)
    assert task.deleted and task.environment_id == "E1"


def test_result_body_removes_token_and_every_temp():
    source = task_body(model(), "tok-123", "ten")
    body = result_body(source)
    assert "token" not in body and "temp" not in body
    assert all("temp" not in s for s in body["services"])
    assert all("temp" not in u for s in body["services"] for u in s["units"])
    assert body["services"][0]["units"][0]["state"] == {"hostname": "h1"}
    assert body["tenant_id"] == "ten"
    assert source["token"] == "tok-123" and "temp" in source  # a copy


def test_clean_model_handles_services_as_object_and_odd_shapes():
    value = {"id": "E", "token": "t", "services": {"a": {"temp": 1, "units": {"u": {"temp": 2}}},
                                                   "b": "odd"}}
    assert contract.clean_model(value) == {"id": "E", "services": {
        "a": {"units": {"u": {}}}, "b": "odd"}}
    assert contract.clean_model({"id": "E", "services": None}) == {"id": "E", "services": None}


def test_report_body_has_exactly_the_0_2_keys():
    body = report_body("uA1", "unit", "Creating instance", "info", "ENV1")
    assert body == {"id": "uA1", "entity": "unit", "text": "Creating instance",
                    "details": None, "level": "info", "environment_id": "ENV1"}
    assert report_body(None, None, "t", "error", "E", details={"a": 1})["details"] == {"a": 1}
    assert report_body(7, "service", "t", "warning", "E")["id"] == "7"


@pytest.mark.parametrize("kwargs, field", [
    ({"entity": "host"}, "entity"),
    ({"level": "debug"}, "level"),
    ({"text": None}, "text"),
    ({"environment_id": 3}, "environment_id"),
    ({"id": ["x"]}, "id"),
])
def test_report_body_checks_fields(kwargs, field):
    args = {"id": "u", "entity": "unit", "text": "t", "level": "info", "environment_id": "E"}
    args.update(kwargs)
    with pytest.raises(ContractError, match=f"^report message: field '{field}' ") as caught:
        report_body(**args)
    assert caught.value.field == field and caught.value.kind == "report"
    assert repr(field) in str(caught.value) and "report message" in str(caught.value)


# ---------------------------------------------------------------- parsing

def test_parse_task_accepts_bytes_str_and_dict():
    body = task_body(model(), "tok", "ten")
    for raw in (json.dumps(body).encode(), json.dumps(body), body,
                b"\xef\xbb\xbf" + json.dumps(body).encode()):
        task = parse_task(raw)
        assert isinstance(task, Task)
        assert task.model == body and task.token == "tok" and task.tenant_id == "ten"
        assert task.environment_id == "ENV1" and task.deleted is False


@pytest.mark.parametrize("change, field, words", [
    ({"id": 5}, "id", "must be a string, got a number"),
    ({"id": ""}, "id", "must not be empty"),
    ({"tenant_id": None}, "tenant_id", "must be a string, got null"),
    ({"token": 12}, "token", "must be a string or null"),
    ({"services": "x"}, "services", "must be a list or an object"),
    ({"deleted": "yes"}, "deleted", "must be a boolean"),
    ({"name": 1}, "name", "must be a string"),
])
def test_parse_task_names_the_bad_field(change, field, words):
    body = {**task_body(model(), "tok", "ten"), **change}
    with pytest.raises(ContractError, match=f"^task message: field '{field}' ") as caught:
        parse_task(body)
    message = str(caught.value)
    assert message.startswith("task message: ") and f"field '{field}'" in message
    assert words in message
    assert caught.value.field == field


def test_parse_task_missing_fields():
    with pytest.raises(ContractError, match="task message: field 'tenant_id' is missing"):
        parse_task({"id": "E", "token": "t"})
    with pytest.raises(ContractError, match="field 'id' is missing"):
        parse_task({"tenant_id": "t"})


def test_errors_do_not_quote_secret_values():
    with pytest.raises(ContractError,
                       match="field 'token' must be a string or null, got a list") as caught:
        parse_task({"id": "E", "tenant_id": "t", "token": ["tok-very-secret"]})
    assert "tok-very-secret" not in str(caught.value)


@pytest.mark.parametrize("raw, where", [
    ('{"id": "E",\n  "x": }', "line 2:8"),
    (b"{", "line 1:2"),
    ("", "line 1:1"),
])
def test_invalid_json_gives_the_position(raw, where):
    with pytest.raises(ContractError, match=f"^task message: invalid JSON at {where} ") as caught:
        parse_task(raw)
    assert f"task message: invalid JSON at {where}" in str(caught.value)
    assert caught.value.field is None


def test_non_utf8_and_non_objects():
    with pytest.raises(ContractError, match="not UTF-8"):
        parse_result(b"\xff\xfe{")
    with pytest.raises(ContractError, match="result message: body must be a JSON object, "
                                            "got a list"):
        parse_result("[1, 2]")
    with pytest.raises(ContractError, match="body must be a JSON object, got null"):
        parse_report("null")


def test_contract_error_is_a_value_error_and_simple_to_raise():
    error = ContractError("bad thing")
    assert isinstance(error, ValueError) and str(error) == "bad thing"
    assert error.kind is None and error.field is None


def test_parse_result():
    body = result_body(model())
    assert parse_result(json.dumps(body)) == body
    with pytest.raises(ContractError, match="result message: field 'id' is missing"):
        parse_result({"name": "x"})
    with pytest.raises(ContractError, match="field 'id' must be a string"):
        parse_result({"id": 1})


def test_parse_report_round_trip():
    body = report_body("SvcA", "service", "done", "warning", "ENV1", details="why")
    report = parse_report(json.dumps(body).encode())
    assert report == Report(id="SvcA", entity="service", text="done", details="why",
                            level="warning", environment_id="ENV1")
    assert report.body() == body


def test_parse_report_defaults_details_and_checks_enums():
    body = {"id": None, "entity": None, "text": "t", "level": "error", "environment_id": "E"}
    assert parse_report(body).details is None
    with pytest.raises(ContractError, match="field 'level' must be one of info, warning, "
                                            "error, got 'fatal'"):
        parse_report({**body, "level": "fatal"})
    with pytest.raises(ContractError, match="field 'entity' must be one of unit, service, "
                                            "environment or null"):
        parse_report({**body, "entity": "Unit"})
    with pytest.raises(ContractError, match="field 'text' is missing"):
        parse_report({k: v for k, v in body.items() if k != "text"})


def test_parse_plan_result():
    ok = {"IsException": False, "Result": [{"IsException": False, "Result": ["x"]}],
          "FormatVersion": "1"}
    assert parse_plan_result(json.dumps(ok)) == ok
    failed = {"IsException": True, "Result": ["System.Exception", "no"]}
    assert parse_plan_result(failed) == failed
    with pytest.raises(ContractError, match="plan result message: field 'IsException' must "
                                            "be a boolean, got a string"):
        parse_plan_result({"IsException": "false", "Result": []})
    with pytest.raises(ContractError, match="field 'Result' must be a list, got an object"):
        parse_plan_result({"IsException": False, "Result": {}})
    with pytest.raises(ContractError, match="field 'Result' is missing"):
        parse_plan_result({"IsException": False})


def test_contract_does_not_import_kombu():
    import ast
    import inspect
    tree = ast.parse(inspect.getsource(contract))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in getattr(node, "names", [])}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert "kombu" not in imported


def test_job_events_are_told_apart_from_results_on_one_queue():
    event = contract.task_event_body("env1", "job1", {"change_id": "A", "status": "ok"})
    assert contract.is_job_event(event)
    assert contract.is_job_event(contract.job_event_body("env1", "job1", "refused", "why"))
    assert not contract.is_job_event(contract.result_body({"id": "env1", "services": []}))
    assert not contract.is_job_event({"id": "env1", "job_id": "x", "kind": "task"})
    assert not contract.is_job_event(["not", "an", "object"])


def test_task_batches_are_job_events_checked_task_by_task():
    body = contract.task_events_body("env1", "job1", [{"change_id": "A", "status": "ok"},
                                                      {"change_id": "B", "log": ["x"]}])
    assert contract.is_job_event(body)
    event = contract.parse_job_event(body)
    assert event.kind == "tasks" and [t["change_id"] for t in event.tasks] == ["A", "B"]
    bad = dict(body, tasks=[{"change_id": "A"}, {"change_id": "B", "status": "done"}])
    with pytest.raises(ContractError, match=r"field 'tasks\[1\]\.status' must be one of"):
        contract.parse_job_event(bad)
    with pytest.raises(ContractError, match=r"field 'tasks\[0\]\.change_id' is missing"):
        contract.parse_job_event(dict(body, tasks=[{"status": "ok"}]))
    with pytest.raises(ContractError, match=r"field 'tasks\[0\]' must be an object"):
        contract.parse_job_event(dict(body, tasks=["A"]))
    with pytest.raises(ContractError, match="has more than 500 tasks"):
        contract.parse_job_event(dict(body, tasks=[{"change_id": "A"}] * 501))


def test_the_version_is_the_last_of_the_history():
    import re
    versions = re.findall(r"^    (\d+\.\d+) - ", contract.__doc__, re.M)
    assert versions[0] == "1.0" and versions[-1] == contract.CONTRACT_VERSION
    assert versions == sorted(versions, key=lambda v: tuple(map(int, v.split("."))))


def test_fences_travel_and_are_checked():
    body = contract.fenced(contract.report_body("e1", "environment", "t", "info", "e1"), 7)
    assert contract.fence_of(body, "report") == 7
    assert contract.fenced({"a": 1}, None) == {"a": 1}
    assert contract.fence_of({"a": 1}, "report") is None
    result = contract.fenced(contract.result_body({"id": "e1", "services": []}), 3)
    assert contract.parse_result(result) == {"id": "e1", "services": []}   # not stored
    for bad in (0, -1, "3", True, 1.5):
        with pytest.raises(contract.ContractError, match="fence"):
            contract.fence_of({"fence": bad}, "report")
    with pytest.raises(contract.ContractError, match="fence"):
        contract.parse_result({"id": "e1", "fence": "x"})


def test_reports_go_in_packs_of_consecutive_reports_and_come_back_out():
    def report(n, env="e1"):
        return contract.report_body(env, "unit", f"r{n}", "info", env)
    sent = [(contract.fenced(report(n), 4), f"t-report-{n}") for n in range(1, 6)]
    sent += [(report(6), "t-report-6"),                       # no fence: another pack
             (report(8), "t-report-8"), (report(9, "e2"), "t-report-9"),   # gap, env
             (report(10), "other-id")]
    packed = contract.pack_reports(sent, most=3)
    assert [(len(b.get("reports", [b])), m) for b, m in packed] == [
        (3, "t-report-1"), (2, "t-report-4"), (1, "t-report-6"), (1, "t-report-8"),
        (1, "t-report-9"), (1, "other-id")]
    assert contract.fence_of(packed[0][0], "report") == 4
    assert "fence" not in packed[0][0]["reports"][0]
    assert [r for b, m in packed for r in contract.unpack_reports(b, m)] == sent
    for bad, match in [({"reports": []}, "non-empty list"),
                       ({"reports": [report(1)] * 201}, "more than 200"),
                       ({"reports": "x"}, "non-empty list")]:
        with pytest.raises(contract.ContractError, match=match):
            contract.unpack_reports(bad, "t-report-1")
    with pytest.raises(contract.ContractError, match="<task id>-report-<n>"):
        contract.unpack_reports({"reports": [report(1)]}, "t-report-0")


def test_a_result_says_how_many_error_reports_its_job_sent():
    plain = contract.result_body({"id": "e1", "services": []})
    assert contract.error_reports_of(plain) == 0 and contract.ERROR_REPORTS not in plain
    body = contract.fenced(contract.result_body({"id": "e1", "services": []}, 2), 3)
    assert contract.error_reports_of(body) == 2
    assert contract.parse_result(body) == {"id": "e1", "services": []}   # not in the model
    for bad in (-1, "2", True, 1.5):
        with pytest.raises(contract.ContractError, match="error_reports"):
            contract.parse_result({"id": "e1", "error_reports": bad})


def test_a_tasks_event_carries_node_states_and_bad_ones_are_named() -> None:
    body = contract.task_events_body("e1", "j1", [], {"u1": {"state": "creating",
                                                             "local": "pending"}})
    assert contract.parse_job_event(body).nodes == {"u1": {"state": "creating",
                                                           "local": "pending"}}
    assert "nodes" not in contract.task_events_body("e1", "j1", [{"change_id": "A"}])
    with_endpoints = {"u1": {"state": "created", "hostname": "web1", "address": "10.0.0.1",
                             "url": "http://10.0.0.1:8080/"}}   # 1.15
    assert contract.parse_job_event(contract.task_events_body(
        "e1", "j1", [], with_endpoints)).nodes == with_endpoints
    for nodes, where in [([], "nodes"), ({"u1": "started"}, "nodes (entry 0)"),
                         ({"u1": {"state": "flying"}}, "nodes (entry 0).state"),
                         ({"u1": {"local": "fine"}}, "nodes (entry 0).local"),
                         ({"u1": {"address": 10}}, "nodes (entry 0).address"),
                         ({"u1": {"url": "x" * 1025}}, "nodes (entry 0).url"),
                         ({"": {}}, "nodes (entry 0)")]:
        bad = {"environment_id": "e1", "job_id": "j1", "kind": "tasks", "tasks": [],
               "nodes": nodes}
        with pytest.raises(contract.ContractError) as caught:
            contract.parse_job_event(bad)
        assert where in str(caught.value)


def test_a_task_names_the_request_that_started_it():
    """Contract 1.13: request_id and global_request_id, optional, not in the model."""
    ours, theirs = "req-" + "0" * 8 + "-1111-2222-3333-" + "4" * 12, \
        "req-abcdef01-2345-6789-abcd-ef0123456789"
    plain = task_body(model(), "tok", "ten")
    body = contract.with_request(plain, ours, theirs)
    assert "request_id" not in plain                        # a copy
    task = parse_task(json.dumps(body))
    assert (task.request_id, task.global_request_id) == (ours, theirs)
    assert "request_id" not in task.model and "global_request_id" not in task.model
    only_ours = parse_task(contract.with_request(plain, ours))
    assert (only_ours.request_id, only_ours.global_request_id) == (ours, None)
    before = parse_task(plain)                              # a task of an older API
    assert (before.request_id, before.global_request_id) == (None, None)
    assert parse_task({**plain, "request_id": None}).request_id is None


@pytest.mark.parametrize("field", ["request_id", "global_request_id"])
@pytest.mark.parametrize("value", ["req-1 INJECTED", "REQ-ABCDEF01-2345-6789-ABCD-EF0123456789",
                                   "abcdef01-2345-6789-abcd-ef0123456789", 7, ["req-x"],
                                   "req-abcdef01-2345-6789-abcd-ef0123456789\n"])
def test_a_malformed_request_id_is_a_contract_error_that_does_not_quote_it(field, value):
    body = {**task_body(model(), "tok", "ten"), field: value}
    with pytest.raises(ContractError) as caught:
        parse_task(body)
    assert caught.value.field == field and "req- followed by a UUID" in str(caught.value)
    assert "INJECTED" not in str(caught.value)
    with pytest.raises(ContractError):
        contract.with_request(task_body(model(), "tok", "ten"), *(
            (value, None) if field == "request_id" else ("req-" + "0" * 8 + "-1111-2222-3333-"
                                                        + "4" * 12, value)))
