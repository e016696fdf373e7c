"""Jobs on the simulated cloud: tasks, change detection, blocking, plan, statuses.

The real local cloud runs the same code in tests/system/test_lifecycle_local.py;
these tests pin down the decisions (which command runs, why, in what order)
quickly and exactly.
"""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from fornace.common import contract
from fornace.common.catalog import load_catalog
from fornace.conductor.dsl.limits import Limits
from fornace.conductor.executors.simulator import Fault, SimulatedCloud
from fornace.conductor.jobs import changes
from fornace.conductor.jobs.lifecycle import Job, run_job
from fornace.conductor.jobs.records import JobRecorder
from fornace.conductor.session import Settings
from fornace.conductor.templates import TemplateStore
from fornace.conductor.workflowfiles import load_workflows

DATA = Path(__file__).resolve().parents[3] / "data"
WORKFLOWS = load_workflows(DATA / "workflows")
STORE = TemplateStore(DATA)
CATALOG = load_catalog(DATA / "types.json")


def web(service_id: str, name: str, port: int, units: int, pattern: str, **extra) -> dict:
    return {"id": service_id, "name": name, "type": "linuxWebServer", "port": port,
            "osImage": {"name": "debian-12", "type": "linux"}, "unitNamingPattern": pattern,
            "units": [{"id": f"{service_id}-u{i}", "name": f"{name}_instance_{i}"}
                      for i in range(units)], **extra}


def environment(*services: dict) -> dict:
    return {"id": "envsim01", "name": "sim", "services": list(services)}


class Cloud:
    """A simulated cloud that keeps its stacks between jobs, as a real one does."""

    def __init__(self, **options) -> None:
        self.sim = SimulatedCloud(**options)
        self.stacks, self.agents = self.sim.executors()

    def run(self, model: dict, action: str = "deploy", **parameters) -> tuple[dict, JobRecorder]:
        task = contract.parse_task(contract.task_body(
            copy.deepcopy(model), None, "tenant",
            job=contract.job_section("job1", action, parameters)))
        recorder = JobRecorder(task.environment_id, "job1")
        self.agents.plans.clear()
        outcome = run_job(Job(task=task, workflows=WORKFLOWS, store=STORE, catalog=CATALOG,
                              stacks=self.stacks, agents=self.agents, recorder=recorder,
                              engine=Settings()))
        return outcome.model, recorder


def commands(recorder: JobRecorder) -> list[tuple[str, str, str]]:
    return [(t.target, t.reason, t.status) for t in recorder.tasks if t.target]


def unit(model: dict, unit_id: str) -> dict:
    return next(u for s in model["services"] for u in s["units"] if u["id"] == unit_id)


def test_a_deployment_records_tasks_and_statuses() -> None:
    cloud = Cloud()
    model, recorder = cloud.run(environment(web("s1", "site", 8080, 2, "web#")))
    stack_tasks = [t for t in recorder.tasks if t.target is None]
    assert stack_tasks and all(t.status == "ok" for t in stack_tasks)
    assert stack_tasks[0].reason == "new"
    assert sorted(commands(recorder)) == [("s1-u0", "new", "ok"), ("s1-u1", "new", "ok")]
    ids = [t.change_id for t in recorder.tasks]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    for unit_id in ("s1-u0", "s1-u1"):
        status = unit(model, unit_id)["status"]
        assert (status["local"], status["state"]) == ("ok", "started")
        assert status["resources"] == [unit(model, unit_id)["state"]["hostname"]]
    assert model["services"][0]["status"] == {"local": "ok", "state": "started"}


def test_redeploying_an_unchanged_environment_runs_no_command() -> None:
    cloud = Cloud()
    model, _ = cloud.run(environment(web("s1", "site", 8080, 2, "web#")))
    again, recorder = cloud.run(model)
    assert cloud.agents.plans == []
    assert [t for t in recorder.tasks if t.target and t.status not in ("skipped",)] == []
    assert unit(again, "s1-u0")["status"]["local"] == "ok"


def test_a_changed_input_reconfigures_only_the_units_that_read_it() -> None:
    cloud = Cloud()
    model, _ = cloud.run(environment(web("s1", "site", 8080, 2, "web#"),
                                     web("s2", "blog", 8090, 1, "blog#")))
    model["services"][0]["port"] = 9000
    _, recorder = cloud.run(model)
    assert sorted(commands(recorder)) == [("s1-u0", "reconfigure", "ok"),
                                          ("s1-u1", "reconfigure", "ok")]
    assert {p.unit for p in cloud.agents.plans} == {"s1-u0", "s1-u1"}
    assert all(p.plan["Commands"][0]["Arguments"]["port"] == 9000 for p in cloud.agents.plans)


@pytest.mark.parametrize("mode, expected", [("evaluate", set()), ("always", {"s1-u0"}),
                                            ("skip", set())])
def test_customized_units_and_change_detection_modes(mode: str, expected: set) -> None:
    cloud = Cloud()
    model, _ = cloud.run(environment(web("s1", "site", 8080, 1, "web#")))
    unit(model, "s1-u0")["status"]["customized"] = True
    model["services"][0]["port"] = 9000
    _, recorder = cloud.run(model, change_detection=mode)
    assert {p.unit for p in cloud.agents.plans} == expected


def test_skip_mode_does_not_reconfigure_a_changed_unit() -> None:
    cloud = Cloud()
    model, _ = cloud.run(environment(web("s1", "site", 8080, 1, "web#")))
    model["services"][0]["port"] = 9000
    cloud.run(model, change_detection="skip")
    assert cloud.agents.plans == []
    cloud.run(model, change_detection="evaluate")
    assert {p.unit for p in cloud.agents.plans} == {"s1-u0"}


def test_a_failed_dependency_blocks_its_dependents_and_a_rerun_resumes() -> None:
    cloud = Cloud()
    cloud.sim.failures.append(Fault("Linux/DeployStaticSite", "s1-u0"))
    model = environment(web("s1", "db", 8080, 1, "db#"),
                        web("s2", "front", 8090, 1, "front#", dependsOn=["s1"]),
                        web("s3", "other", 8100, 1, "other#"))
    model, recorder = cloud.run(model)
    assert sorted(commands(recorder)) == [("s1-u0", "new", "error"), ("s2-u0", "new", "blocked"),
                                          ("s3-u0", "new", "ok")]
    assert {p.unit for p in cloud.agents.plans} == {"s1-u0", "s3-u0"}   # s2 never sent
    sent = [p.unit for p in cloud.agents.plans]
    assert sorted(sent) == ["s1-u0", "s3-u0"]          # each sent once, s2 never
    assert unit(model, "s1-u0")["status"]["local"] == "error"
    assert unit(model, "s2-u0")["status"]["local"] != "ok"
    blocked = next(t for t in recorder.tasks if t.status == "blocked")
    assert "front depends on db" in blocked.summary

    cloud.sim.failures.clear()
    model, recorder = cloud.run(model)
    assert sorted(commands(recorder)) == [("s1-u0", "repair", "ok"), ("s2-u0", "new", "ok")]
    assert [p.unit for p in cloud.agents.plans] == ["s1-u0", "s2-u0"]   # by dependency level
    assert all(unit(model, u)["status"]["local"] == "ok" for u in ("s1-u0", "s2-u0", "s3-u0"))


def test_plan_shows_the_next_deployment_without_running_it() -> None:
    cloud = Cloud()
    model = environment(web("s1", "site", 8080, 2, "web#"))
    result, recorder = cloud.run(model, action="plan")
    assert cloud.agents.plans == [] and cloud.stacks.stacks == {}
    assert result["services"][0].get("status") is None   # nothing changed
    planned = [t for t in recorder.tasks if t.status == "planned"]
    assert sorted(t.target for t in planned if t.target) == ["s1-u0", "s1-u1"]
    assert any(t.target is None for t in planned)

    deployed, _ = cloud.run(model)
    deployed["services"][0]["port"] = 9000
    _, recorder = cloud.run(deployed, action="plan")
    assert sorted((t.target, t.reason) for t in recorder.tasks if t.target) == [
        ("s1-u0", "reconfigure"), ("s1-u1", "reconfigure")]


def test_uninstall_goes_by_reverse_dependency_and_keeps_protected_units() -> None:
    cloud = Cloud()
    model, _ = cloud.run(environment(web("s1", "db", 8080, 2, "db#"),
                                     web("s2", "front", 8090, 1, "front#", dependsOn=["s1"])))
    unit(model, "s1-u1")["status"]["protected"] = True
    model, recorder = cloud.run(model, action="uninstall")
    assert cloud.stacks.removals == [("eenvsim01", ["front1"]),
                                     ("eenvsim01", ["db1"])]
    stops = [t.target for t in recorder.tasks if t.operation.startswith("stop")]
    assert stops == ["s2-u0", "s1-u0"]                       # dependents first
    assert unit(model, "s1-u1")["status"]["local"] == "ok"   # protected: kept
    assert unit(model, "s1-u1")["state"]["siteDeployed"] is True
    for gone in ("s1-u0", "s2-u0"):
        status = unit(model, gone)["status"]
        assert (status["local"], status["state"]) == ("absent", "deleted")
        assert unit(model, gone)["state"] == {"hostname": unit(model, gone)["state"]["hostname"]}
    assert model["services"][0]["status"]["local"] == "degraded"


def test_scale_in_leaves_protected_units_and_heal_reinstalls_one() -> None:
    cloud = Cloud()
    model, _ = cloud.run(environment(web("s1", "site", 8080, 3, "web#")))
    unit(model, "s1-u2")["status"]["protected"] = True
    model, _ = cloud.run(model, action="scale", node_id="s1", delta=-1)
    assert [u["id"] for u in model["services"][0]["units"]] == ["s1-u0", "s1-u2"]
    assert cloud.stacks.removals == [("eenvsim01", ["web2"])]

    model, recorder = cloud.run(model, action="heal", node_instance_id="s1-u0")
    assert cloud.stacks.removals[-1] == ("eenvsim01", ["web1"])
    assert [(t.target, t.reason) for t in recorder.tasks if t.target] == [("s1-u0", "repair")]
    assert unit(model, "s1-u0")["status"]["local"] == "ok"
    assert "web1" in cloud.stacks.stacks["eenvsim01"]["Resources"]   # created again


def test_a_repeated_scale_out_adds_the_same_units() -> None:
    """Regression: new units got random ids, so a scale task redelivered to another
    conductor added other units (and replaced the first run's instance)."""
    model, _ = Cloud().run(environment(web("s1", "site", 8080, 1, "web#")))
    first, _ = Cloud().run(model, action="scale", node_id="s1", delta=2)
    again, _ = Cloud().run(model, action="scale", node_id="s1", delta=2)
    ids = [[u["id"] for u in m["services"][0]["units"]] for m in (first, again)]
    assert ids[0] == ids[1] and len(set(ids[0])) == 3
    other, _ = Cloud().run(model, action="scale", node_id="s1", delta=1)  # same job id "job1"
    assert other["services"][0]["units"][1]["id"] == ids[0][1]       # ordinal 0 of job1


@pytest.mark.parametrize("action", ["deploy", "check"])
def test_a_task_model_over_the_limits_ends_the_job_with_an_error_report(action) -> None:
    model = environment(web("s1", "site", 80, 1, "web#", notes="n" * 5000))
    task = contract.parse_task(contract.task_body(model, None, "tenant",
                                                  job=contract.job_section("job1", action, {})))
    recorder = JobRecorder(task.environment_id, "job1")
    reports: list = []
    stacks, agents = SimulatedCloud().executors()
    outcome = run_job(Job(task=task, workflows=WORKFLOWS, store=STORE, catalog=CATALOG,
                          stacks=stacks, agents=agents, recorder=recorder, reporter=reports.append,
                          engine=Settings(limits=Limits(max_model_bytes=4096))))
    assert outcome.status == "error" and agents.plans == [] and stacks.stacks == {}
    assert [r["text"] for r in reports] == [
        f"{action} failed: the environment's model is larger than 4096 bytes as JSON "
        f"([engine] max_model_bytes)"]


def test_a_command_another_services_rule_sends_is_not_stale_at_the_next_deployment() -> None:
    """In the benchmark's catalog (Murano 0.2's shape) a nested rule that
    matched the Active Directory service sends JoinDomain to a web unit: the
    directory owns that command, and what is recorded for it is the
    directory's own description -- the one the next deployment compares --
    so nothing is found changed and nothing runs again."""
    bench = DATA.parent / "tools" / "bench_catalog"
    workflows, store = load_workflows(bench / "workflows"), TemplateStore(bench)

    def service(sid: str, name: str, kind: str, pattern: str, units: list[dict]) -> dict:
        return {"id": sid, "name": name, "type": kind, "domain": "acme.loc",
                "osImage": {"name": "ws-2012-std", "type": "ws-2012-std"},
                "adminPassword": "Adm1n-pass!", "unitNamingPattern": pattern,
                "units": [{"id": f"{sid}-u{i}", "name": f"{name}_instance_{i}", **unit}
                          for i, unit in enumerate(units)]}

    sim = SimulatedCloud(command_results={"AskDnsIp": [{"Result": ["10.0.0.2"]}]})
    stacks, agents = sim.executors()

    def deploy(model: dict) -> tuple[dict, JobRecorder]:
        task = contract.parse_task(contract.task_body(
            copy.deepcopy(model), None, "tenant", job=contract.job_section("j", "deploy", {})))
        recorder = JobRecorder(task.environment_id, "j")
        agents.plans.clear()
        outcome = run_job(Job(task=task, workflows=workflows, store=store, catalog=None,
                              stacks=stacks, agents=agents, recorder=recorder,
                              engine=Settings()))
        assert outcome.status == "success", outcome.reports
        return outcome.model, recorder

    model, first = deploy(environment(
        service("ad", "acme", "activeDirectory", "dc#",
                [{"isMaster": True, "recoveryPassword": "Rec0very-pass!"}]),
        service("w1", "web", "webServer", "web#", [{}])))
    assert ("w1-u0", "new", "ok") in commands(first)
    directory = model["services"][0]
    join = directory["status"]["configs"]["JoinDomain@w1-u0"]
    assert join["inputs"] == changes.description_digest(directory)
    assert changes.prepare(copy.deepcopy(model)) == {}
    _, again = deploy(model)
    assert [c for c in commands(again) if c[2] != "skipped"] == []
    assert agents.plans == []


def run_observed(cloud: Cloud, model: dict, action: str = "deploy",
                 **parameters) -> tuple[dict, list[dict]]:
    """A job whose events are kept: each change sent at once (batch_seconds 0)."""
    task = contract.parse_task(contract.task_body(
        copy.deepcopy(model), None, "tenant", job=contract.job_section("j", action, parameters)))
    events: list[dict] = []
    recorder = JobRecorder(task.environment_id, "j", lambda body, _id: events.append(body),
                           batch_seconds=0)
    outcome = run_job(Job(task=task, workflows=WORKFLOWS, store=STORE, catalog=CATALOG,
                          stacks=cloud.stacks, agents=cloud.agents, recorder=recorder,
                          engine=Settings()))
    return outcome.model, events


def node_states(events: list[dict], node_id: str) -> list[str]:
    """The node states ``node_id`` went through, in the order they were sent."""
    states = [e["nodes"][node_id]["state"] for e in events if node_id in e.get("nodes", {})]
    return [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]


def test_node_states_are_sent_as_a_deployment_moves_them() -> None:
    cloud = Cloud(stack_outputs={"web1": "10.0.0.1", "web2": "10.0.0.2"})
    model, events = run_observed(cloud, environment(web("s1", "site", 8080, 2, "web#")))
    assert all(contract.parse_job_event(e) for e in events)   # contract 1.5 bodies
    for unit_id in ("s1-u0", "s1-u1"):
        assert node_states(events, unit_id) == ["creating", "created", "configuring",
                                                "configured", "started"]
    assert node_states(events, "s1") == ["creating", "created", "configuring", "started"]
    # the endpoints go as soon as the workflows set them (contract 1.15): the hostname
    # with the first state, the address once the stack is up, before any command
    for unit_id in ("s1-u0", "s1-u1"):
        sent = [e["nodes"][unit_id] for e in events if unit_id in e.get("nodes", {})]
        state = unit(model, unit_id)["state"]
        assert sent[0]["state"] == "creating" and sent[0]["hostname"] == state["hostname"]
        first = next(node for node in sent if "address" in node)
        assert (first["state"], first["address"]) == ("created", state["address"])
        assert sent[-1]["url"] == state["url"]
    # a redeployment: instances that exist are not "creating" again
    cloud.agents.plans.clear()
    model["services"][0]["port"] = 9000       # reconfigured, not recreated
    _, events = run_observed(cloud, model)
    assert node_states(events, "s1-u0") == ["configuring", "configured", "started"]
    # the last state sent is the one the result carries
    last = [e["nodes"]["s1-u0"] for e in events if "s1-u0" in e.get("nodes", {})][-1]
    status = unit(model, "s1-u0")["status"]
    assert (last["state"], last["local"]) == (status["state"], status["local"])


def test_stop_and_start_move_the_node_state_and_check_sets_only_the_status() -> None:
    cloud = Cloud()
    model, _ = cloud.run(environment(web("s1", "site", 8080, 1, "web#")))
    model, events = run_observed(cloud, model, "execute_operation", operation="stop")
    assert node_states(events, "s1-u0") == ["stopping", "stopped"]
    assert unit(model, "s1-u0")["status"]["state"] == "stopped"
    model, events = run_observed(cloud, model, "execute_operation", operation="start")
    assert node_states(events, "s1-u0") == ["starting", "started"]
    assert unit(model, "s1-u0")["status"]["state"] == "started"

    cloud.sim.command_results["Linux/CheckServer"] = \
        '{"status": "error", "detail": "site: not running"}'   # a command's output line
    model, events = run_observed(cloud, model, "check")
    sent = [e["nodes"]["s1-u0"] for e in events if "s1-u0" in e.get("nodes", {})]
    state = unit(model, "s1-u0")["state"]
    assert sent and sent[-1] == {"state": "started", "local": "error",
                                 **{k: state[k] for k in ("hostname", "address", "url")
                                    if state.get(k)}}
    assert unit(model, "s1-u0")["status"]["check"] == "site: not running"


def test_only_instances_that_do_not_exist_are_reported_as_created() -> None:
    """Regression: every deploy, scale and heal said "Creating instance web1" also
    for units whose instance existed."""
    sim = SimulatedCloud(stack_outputs={"web1": "10.0.0.1", "web2": "10.0.0.2",
                                        "web3": "10.0.0.3"})
    stacks, agents = sim.executors()

    def texts_of(model: dict, action: str = "deploy", **parameters) -> tuple[dict, list[str]]:
        task = contract.parse_task(contract.task_body(
            copy.deepcopy(model), None, "tenant",
            job=contract.job_section("j", action, parameters)))
        reports: list[dict] = []
        outcome = run_job(Job(task=task, workflows=WORKFLOWS, store=STORE, catalog=CATALOG,
                              stacks=stacks, agents=agents, recorder=JobRecorder("e", "j"),
                              engine=Settings(), reporter=reports.append))
        return outcome.model, [r["text"] for r in reports]

    def created(texts: list[str]) -> list[str]:
        return [t for t in texts if t.startswith("Creating instance") or t.endswith(" created")]

    model, texts = texts_of(environment(web("s1", "site", 8080, 2, "web#")))
    assert created(texts) == ["Creating instance web1 (site_instance_0)",
                              "Creating instance web2 (site_instance_1)",
                              "Instance web1 (site_instance_0) created",
                              "Instance web2 (site_instance_1) created"]
    model, texts = texts_of(model)
    assert created(texts) == []
    model, texts = texts_of(model, "scale", node_id="s1", delta=1)
    assert created(texts) == ["Creating instance web3 (site_instance_2)",
                              "Instance web3 (site_instance_2) created"]
    model, texts = texts_of(model, "heal", node_instance_id="s1-u0")
    assert created(texts) == ["Creating instance web1 (site_instance_0)",
                              "Instance web1 (site_instance_0) created"]
