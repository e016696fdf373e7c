"""Lifecycle workflows end to end: the REST API, the conductor and the local
cloud's real agents (folder broker, SQLite), as ``fornace up`` runs them.

Each test builds its own environment of Linux services whose scripts really
run; the jobs, their tasks and the units' status are read back through the
API, and the servers are asked over HTTP.
"""
from __future__ import annotations

import json
import urllib.error
from pathlib import Path
import urllib.request
from typing import Any

import pytest

from fornace.cli.client.http import ApiClient, ClientError
from apikit import free_port
from fornace.cli.onebox import OneBox
from localkit import instance_processes, running_onebox
from waiting import wait_for

TIMEOUT = 120.0
ROOT = Path(__file__).resolve().parents[2]


ABSENT_AFTER = 3.0   # [engine] agent_absent_after of these tests' conductor


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    yield from running_onebox(tmp_path_factory.mktemp("lifecycle") / "state",
                              overrides={"engine": {"agent_absent_after": ABSENT_AFTER}})


class Env:
    """One environment driven through the REST API."""

    def __init__(self, box: OneBox, name: str) -> None:
        self.box = box
        self.client = ApiClient(box.url)
        self.id = self.client.post("/environments", {"name": name})["id"]

    # -- sessions and deployments -------------------------------------------------
    def deploy(self, *services: dict, changes: Any = None, **query: str) -> dict:
        """Add ``services`` (and apply ``changes(client, session)``), deploy, wait."""
        session = self.client.post(f"/environments/{self.id}/configure")["id"]
        for service in services:
            self.client.post(f"/environments/{self.id}/services", service, session=session)
        if changes is not None:
            changes(self.client, session)
        suffix = "?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else ""
        self.client.post(f"/environments/{self.id}/sessions/{session}/deploy{suffix}")
        return self.wait(self.jobs()[0]["id"])

    def put(self, service_id: str, field: str, value: Any) -> Any:
        def change(client: ApiClient, session: str) -> None:
            client.request("PUT", f"/environments/{self.id}/services/{service_id}/{field}",
                           value, {"X-Configuration-Session": session})
        return change

    def action(self, name: str, wait: bool = True, **parameters: Any) -> dict:
        job = self.client.post(f"/environments/{self.id}/actions/{name}", parameters)
        return self.wait(job["id"]) if wait else job

    def wait(self, job_id: str) -> dict:
        def ended() -> dict | None:
            job = self.client.get(f"/environments/{self.id}/jobs/{job_id}")
            env = self.client.get(f"/environments/{self.id}")
            done = (job["state"] not in ("running", "queued")
                    and env["status"] not in ("deploying", "deleting"))
            return job if done else None
        job = wait_for(ended, f"job {job_id} to end", timeout=TIMEOUT)
        # a job's task events come before its result (one queue): all settled
        assert all(t["status"] not in ("pending", "running") for t in job["tasks"]), job
        return job

    def jobs(self) -> list[dict]:
        return self.client.get(f"/environments/{self.id}/jobs")["jobs"]

    def services(self) -> list[dict]:
        return self.client.get(f"/environments/{self.id}")["services"]

    def units(self, service_name: str) -> list[dict]:
        return next(s for s in self.services() if s["name"] == service_name)["units"]

    def status(self) -> dict[str, dict]:
        """unit name (or service name) -> its status object."""
        found = {}
        for service in self.client.get(f"/environments/{self.id}/status")["services"]:
            found[service["name"]] = service["status"]
            for unit in service["units"]:
                found[unit["name"]] = unit["status"]
        return found

    def tokens(self) -> dict[str, str]:
        """instance name -> the token its processes carry."""
        return {name: info["token"]
                for name, info in self.box.cloud.instances(f"e{self.id}").items()}


def commands(job: dict) -> list[dict]:
    """The agent-command tasks of a job (stack tasks have no target)."""
    return [t for t in job["tasks"] if t["target"]]


def site(name: str, port: int, units: int = 1, pattern: str | None = None,
         **extra: Any) -> dict:
    return {"name": name, "type": "linuxWebServer", "port": port,
            "unitNamingPattern": pattern or f"{name}#",
            "osImage": {"name": "local", "type": "linux"},
            "units": [{} for _ in range(units)], **extra}


def answers(address: str, port: int, path: str = "/") -> str | None:
    try:
        with urllib.request.urlopen(f"http://{address}:{port}{path}", timeout=5) as page:
            return page.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError):
        return None


def address_of(unit: dict) -> str:
    return unit["state"]["address"]


def service_id(env: Env, name: str) -> str:
    return next(s["id"] for s in env.services() if s["name"] == name)


# ------------------------------------------------------------- install / uninstall

def test_install_uninstall_and_install_again(box):
    env = Env(box, "install")
    db_port, front_port = free_port(), free_port()
    env.deploy(site("db", db_port))
    db_id = service_id(env, "db")
    job = env.deploy(site("front", front_port, dependsOn=[db_id]))
    assert job["action"] == "deploy" and job["state"] == "success"

    topology = env.client.get(f"/environments/{env.id}/topology")
    front_id = service_id(env, "front")
    assert {"source": front_id, "target": db_id, "kind": "depends_on",
            "reason": "dependsOn"} in topology["edges"]
    assert topology["levels"] == [[db_id], [front_id]]
    status = env.status()
    assert status["db_instance_0"]["local"] == "ok"
    assert status["front_instance_0"]["state"] == "started"
    front = env.units("front")[0]
    assert "front" in answers(address_of(front), front_port)

    tokens = env.tokens()
    job = env.action("uninstall")
    assert job["state"] == "success", job
    tasks = job["tasks"]
    ops = [(t["target_name"], t["operation"]) for t in tasks]
    stops = [i for i, t in enumerate(tasks) if t["operation"].startswith("stop")]
    assert [tasks[i]["target_name"] for i in stops] == ["front1", "db1"], ops  # dependents first
    removals = [t for t in tasks if t["operation"].startswith("remove ")]
    assert [t["operation"] for t in removals] == ["remove front1", "remove db1"]
    assert all(t["status"] == "ok" for t in tasks)
    assert not any(instance_processes(t) for t in tokens.values())
    assert answers(address_of(front), front_port) is None
    status = env.status()
    assert (status["db_instance_0"]["local"], status["db_instance_0"]["state"]) == (
        "absent", "deleted")
    assert env.client.get(f"/environments/{env.id}")["status"] == "ready"

    job = env.action("install")
    assert job["state"] == "success"
    assert sorted((t["target_name"], t["reason"]) for t in commands(job)) == [
        ("db1", "new"), ("front1", "new")]
    front = env.units("front")[0]
    assert "front" in answers(address_of(front), front_port)


# ------------------------------------------------------------- execute_operation

def test_execute_operation_filters_and_order(box):
    env = Env(box, "operations")
    env.deploy(site("one", free_port(), units=2), site("two", free_port()))
    one, two = service_id(env, "one"), service_id(env, "two")
    unit_ids = {u["name"]: u["id"] for s in env.services() for u in s["units"]}

    def targets(**filters: Any) -> list[str]:
        job = env.action("execute_operation", operation="run",
                         operation_kwargs={"command": "echo ran on $(hostname 2>/dev/null)"},
                         **filters)
        assert job["state"] == "success", job
        assert all(t["status"] == "ok" for t in commands(job)), commands(job)
        return sorted(t["target_name"] for t in commands(job))

    assert targets() == ["one1", "one2", "two1"]
    assert targets(node_ids=[one]) == ["one1", "one2"]
    assert targets(node_instance_ids=[unit_ids["one_instance_1"]]) == ["one2"]
    assert targets(type_names=["linuxService"]) == ["one1", "one2", "two1"]
    assert targets(type_names=["linuxApp"]) == []
    assert targets(node_ids=[one], node_instance_ids=[unit_ids["two_instance_0"]]) == []
    assert targets(node_ids=[two], type_names=["linuxWebServer"]) == ["two1"]

    with pytest.raises(ClientError, match="has no operation 'no_such_operation'") as missing:
        env.action("execute_operation", operation="no_such_operation")
    assert missing.value.status == 400 and "no_such_operation" in str(missing.value)

    # an input the catalog gives may be overridden only when allowed
    with pytest.raises(ClientError,
                       match="would override the input 'port' of operation 'check'") as refused:
        env.action("execute_operation", operation="check", node_ids=[two],
                   operation_kwargs={"port": 1})
    assert refused.value.status == 400 and "allow_kwargs_override" in str(refused.value)
    job = env.action("execute_operation", operation="check", node_ids=[two],
                     operation_kwargs={"port": 1}, allow_kwargs_override=True)
    assert [t["status"] for t in commands(job)] == ["error"]   # nothing listens on port 1

    # run_by_dependency_order: the dependency's tasks end before the dependent's start
    env.deploy(changes=env.put(two, "dependsOn", [one]))
    job = env.action("execute_operation", operation="run", run_by_dependency_order=True,
                     operation_kwargs={"command": "sleep 0.5; echo done"})
    tasks = commands(job)
    last_of_one = max(t["finished"] for t in tasks if t["target_name"].startswith("one"))
    first_of_two = min(t["started"] for t in tasks if t["target_name"].startswith("two"))
    assert last_of_one <= first_of_two
    ids = [t["change_id"] for t in job["tasks"]]
    assert ids == sorted(ids)


# ----------------------------------------------------------------------- check

def test_check_updates_the_status_of_each_unit(box):
    env = Env(box, "check")
    port = free_port()
    env.deploy(site("web", port, units=2))
    job = env.action("check")
    assert sorted((t["target_name"], t["status"]) for t in commands(job)) == [
        ("web1", "ok"), ("web2", "ok")]
    web2 = next(u for u in env.units("web") if u["state"]["hostname"] == "web2")
    env.action("execute_operation", operation="stop", node_instance_ids=[web2["id"]])
    assert answers(address_of(web2), port) is None
    env.action("check")
    status = env.status()
    assert status["web_instance_0"]["local"] == "ok"
    assert status["web_instance_1"]["local"] == "error"
    assert status["web"]["local"] == "degraded"
    env.action("execute_operation", operation="start", node_instance_ids=[web2["id"]])
    env.action("check")
    assert env.status()["web"]["local"] == "ok"


# -------------------------------------------------------------- change detection

def test_change_detection_and_plan(box):
    env = Env(box, "changes")
    one_port, two_port = free_port(), free_port()
    env.deploy(site("one", one_port, units=2), site("two", two_port))
    one, two = service_id(env, "one"), service_id(env, "two")

    job = env.deploy()                       # nothing changed: no agent command
    assert job["state"] == "success"
    assert [t for t in commands(job) if t["status"] != "skipped"] == []

    new_port = free_port()
    plan = env.action("plan", wait=False)
    plan = env.wait(plan["id"])
    assert commands(plan) == []              # the stored description has not changed yet

    def change(client: ApiClient, session: str) -> None:
        client.request("PUT", f"/environments/{env.id}/services/{two}/port", new_port,
                       {"X-Configuration-Session": session})
    job = env.deploy(changes=change)
    assert sorted((t["target_name"], t["reason"], t["status"]) for t in commands(job)) == [
        ("two1", "reconfigure", "ok")]
    assert answers(address_of(env.units("two")[0]), new_port)
    for unit in env.units("one"):             # the other service still answers on its port
        assert answers(address_of(unit), one_port)

    # "always" reconfigures a customized unit, "evaluate" leaves it alone
    def customize(client: ApiClient, session: str) -> None:
        client.request("PUT", f"/environments/{env.id}/services/{one}/port", free_port(),
                       {"X-Configuration-Session": session})
    session_before = env.jobs()[0]["id"]
    job = env.deploy(changes=customize, change_detection="skip")
    assert commands(job) == [] and env.jobs()[0]["id"] != session_before


def test_plan_lists_the_next_deployment_without_running_it(box):
    env = Env(box, "plan")
    env.deploy(site("web", free_port(), units=2), site("other", free_port()))
    web = service_id(env, "web")
    tokens = env.tokens()
    version = env.client.get(f"/environments/{env.id}")["version"]
    session = env.client.post(f"/environments/{env.id}/configure")["id"]
    new_port = free_port()
    env.client.request("PUT", f"/environments/{env.id}/services/{web}/port", new_port,
                       {"X-Configuration-Session": session})

    # planned on the session: what deploying it would run, nothing run
    job = env.client.post(f"/environments/{env.id}/actions/plan", {}, session=session)
    job = env.wait(job["id"])
    assert job["state"] == "success"
    assert all(t["status"] == "planned" for t in job["tasks"])
    planned = sorted((t["target_name"], t["operation"], t["reason"]) for t in commands(job))
    assert planned == [("web1", "Linux/DeployStaticSite", "reconfigure"),
                       ("web2", "Linux/DeployStaticSite", "reconfigure")]
    assert env.client.get(f"/environments/{env.id}")["version"] == version
    assert env.tokens() == tokens
    assert all(answers(address_of(u), new_port) is None for u in env.units("web"))
    with pytest.raises(ClientError,   # other actions run on what is deployed
                       match="^only plan takes a configuration session") as refused:
        env.client.post(f"/environments/{env.id}/actions/check", {}, session=session)
    assert refused.value.status == 400 and "only plan" in str(refused.value)

    # the deployment then does what the plan said
    env.client.post(f"/environments/{env.id}/sessions/{session}/deploy")
    job = env.wait(env.jobs()[0]["id"])
    ran = sorted((t["target_name"], t["operation"], t["reason"]) for t in commands(job))
    assert ran == planned
    assert all(answers(address_of(u), new_port) for u in env.units("web"))


# ------------------------------------------------------------------ heal, scale

def farm(name: str, port: int, lb_port: int, units: int = 2) -> dict:
    return {**site(name, port, units), "type": "linuxWebServerFarm", "loadBalancerPort": lb_port}


def backends(address: str, port: int, tries: int = 12) -> set[str]:
    seen = set()
    for _ in range(tries):
        try:
            with urllib.request.urlopen(f"http://{address}:{port}/", timeout=5) as page:
                seen.add(page.headers.get("X-Fornace-Backend"))
        except (urllib.error.URLError, OSError):
            pass
    return seen


def test_heal_reinstalls_a_unit_and_its_relationships(box):
    env = Env(box, "heal")
    port, lb_port = free_port(), free_port()
    env.deploy(farm("shop", port, lb_port))
    service = next(s for s in env.services() if s["name"] == "shop")
    lb = service["state"]["address"]
    assert backends(lb, lb_port) == {"shop1", "shop2"}
    shop2 = next(u for u in service["units"] if u["state"]["hostname"] == "shop2")
    before = env.tokens()
    job = env.action("heal", node_instance_id=shop2["id"])
    assert job["state"] == "success", job
    ops = [(t["target_name"], t["operation"].split(" ")[0], t["reason"]) for t in job["tasks"]]
    assert ops[0][1] == "unlink" and "Deregister" in job["tasks"][0]["operation"], ops
    assert any(t["operation"] == "remove shop2" for t in job["tasks"])
    assert any("RegisterBackend" in t["operation"] and t["reason"] == "repair"
               for t in job["tasks"]), ops
    after = env.tokens()
    assert after["shop2"] != before["shop2"]          # a new instance
    assert after["shop1"] == before["shop1"]          # the other one untouched
    assert backends(lb, lb_port) == {"shop1", "shop2"}
    assert env.status()["shop_instance_1"]["local"] == "ok"


def test_scale_out_and_in(box):
    env = Env(box, "scale")
    port, lb_port = free_port(), free_port()
    env.deploy(farm("shop", port, lb_port))
    shop = service_id(env, "shop")
    lb = next(s for s in env.services() if s["name"] == "shop")["state"]["address"]
    before = env.tokens()

    job = env.action("scale", node_id=shop, delta=1)
    assert job["state"] == "success", job
    assert sorted({t["target_name"] for t in commands(job)}) == ["shop3"]
    after = env.tokens()
    assert {k: after[k] for k in before} == before    # existing instances untouched
    assert backends(lb, lb_port) == {"shop1", "shop2", "shop3"}

    job = env.action("scale", node_id=shop, delta=-2)
    assert job["state"] == "success", job
    operations = [t["operation"] for t in job["tasks"]]
    assert sum("DeregisterBackend" in o for o in operations) == 2
    first_removal = next(i for i, o in enumerate(operations) if o.startswith("remove"))
    assert all(i < first_removal for i, o in enumerate(operations) if "Deregister" in o)
    assert [u["state"]["hostname"] for u in env.units("shop")] == ["shop1"]
    assert backends(lb, lb_port) == {"shop1"}
    assert not instance_processes(after["shop3"])

    with pytest.raises(ClientError,
                       match="parameter 'delta' would leave service shop ") as too_many:
        env.action("scale", node_id=shop, delta=-1)
    assert too_many.value.status == 400


# ------------------------------------------------------ locks and half-failed reruns

def test_a_second_job_is_refused_while_one_runs_and_queued_behind_a_conductors_lock(box):
    env = Env(box, "lock")
    env.deploy(site("web", free_port()))
    job = env.action("execute_operation", wait=False, operation="run",
                     operation_kwargs={"command": "sleep 3"})
    with pytest.raises(ClientError, match="^environment lock is busy: job [0-9a-f]+ ") as busy:
        env.action("check")
    assert busy.value.status == 409
    assert job["id"] in str(busy.value) and "abandon" in str(busy.value)
    env.wait(job["id"])

    # the conductors' own lock held elsewhere: the job is queued, says why, runs after
    grant = box.conductor.locks.acquire(env.id, "someone-else", "other-conductor")
    try:
        job = env.action("check", wait=False)
        wait_for(lambda: env.client.get(f"/environments/{env.id}/jobs/{job['id']}")["state"]
                 == "queued", "the check to be queued behind the other conductor's job")
        reports = env.client.get(f"/environments/{env.id}/deployments/{job['id']}")["reports"]
        assert any("someone-else" in r["text"] for r in reports), reports
    finally:
        assert box.conductor.locks.release(grant)
    assert env.wait(job["id"])["state"] == "success"
    assert env.action("check")["state"] == "success"


def app(name: str, port: int, command: str, **extra: Any) -> dict:
    return {"name": name, "type": "linuxApp", "port": port, "unitNamingPattern": f"{name}#",
            "osImage": {"name": "local", "type": "linux"}, "units": [{}],
            "source": str(ROOT / "data" / "examples" / "apps" / "hello"),
            "startCommand": command, "healthPath": "/health", "startTimeout": 5, **extra}


def test_a_half_failed_deployment_is_finished_by_a_rerun(box):
    env = Env(box, "rerun")
    app_port, front_port, other_port = free_port(), free_port(), free_port()

    def services(client: ApiClient, session: str) -> None:
        api = client.post(f"/environments/{env.id}/services", app("api", app_port, "exit 3"),
                          session=session)
        client.post(f"/environments/{env.id}/services",
                    site("front", front_port, dependsOn=[api["id"]]), session=session)
    job = env.deploy(site("other", other_port), changes=services)
    assert job["state"] == "completed_w_errors"
    statuses = {t["target_name"]: t["status"] for t in commands(job)}
    assert statuses == {"other1": "ok", "api1": "error", "front1": "blocked"}, job["tasks"]
    api = service_id(env, "api")
    assert env.status()["front_instance_0"]["local"] == "pending"

    job = env.deploy(changes=env.put(api, "startCommand", "python3 app.py"))
    assert job["state"] == "success", job
    ran = sorted((t["target_name"], t["reason"], t["status"]) for t in commands(job))
    assert ran == [("api1", "reconfigure", "ok"), ("front1", "new", "ok")]  # other1 not again
    assert answers(address_of(env.units("front")[0]), front_port)
    assert answers(address_of(env.units("api")[0]), app_port, "/health")


def test_script_log_lines_reach_the_task_while_it_runs(box, tmp_path):
    env = Env(box, "logs")
    env.deploy(site("web", free_port()))
    go = tmp_path / "go"        # the command goes on only once its first line was seen
    job = env.action("execute_operation", wait=False, operation="run",
                     operation_kwargs={"command": f"echo line-1; n=0; while [ ! -e {go} ] "
                                                  "&& [ $n -lt 1200 ]; do sleep 0.1; "
                                                  "n=$((n+1)); done; for i in 2 3 4 5 6; do "
                                                  "echo line-$i; done"})
    def first_lines() -> list | None:
        tasks = commands(env.client.get(f"/environments/{env.id}/jobs/{job['id']}"))
        if tasks and tasks[0]["status"] != "running":
            return ["(ended)"]
        return list(tasks[0]["log"]) if tasks and tasks[0]["log"] else None
    seen_running = wait_for(first_lines, "the first log line", timeout=TIMEOUT)
    go.touch()
    assert seen_running[0] == "line-1", seen_running   # while the command waited
    job = env.wait(job["id"])
    log = commands(job)[0]["log"]
    assert [line for line in log if line.startswith("line-")] == [f"line-{i}" for i in range(1, 7)]


def test_an_instance_killed_mid_plan_fails_its_task_in_seconds(box):
    """Regression: on the folder broker (no RabbitMQ) nothing noticed a unit whose
    agent and boot process were killed: its plan waited the whole agent_timeout.
    Now the agent's consumer file, left by a dead process, no longer counts."""
    import os
    import signal

    env = Env(box, "killed")
    env.deploy(site("web", free_port()))
    job = env.action("execute_operation", wait=False, operation="run",
                     operation_kwargs={"command": "echo begun; sleep 300"})
    wait_for(lambda: any(t["log"] for t in commands(
        env.client.get(f"/environments/{env.id}/jobs/{job['id']}"))), "the command to start",
        timeout=TIMEOUT)
    [token] = env.tokens().values()
    for pid in instance_processes(token):
        os.kill(pid, signal.SIGKILL)
    job = env.wait(job["id"])
    [task] = commands(job)
    assert task["status"] == "error", task
    # noticed gone, not waited out (agent_timeout is 60 s here; how soon: bench_startup.py)
    assert "stopped listening" in task["summary"] and "web1" in task["summary"], task


def test_a_password_given_to_an_action_is_masked_in_its_task_log(box):
    """Regression: the conductor masked the environment's secrets only, so a
    password passed in an action's operation_kwargs and printed by the
    command was stored and shown in clear."""
    secret = "Act10n-Pa55-word"
    env = Env(box, "kwsecret")
    env.deploy(site("web", free_port()))
    job = env.action("execute_operation", operation="run",
                     operation_kwargs={"command": f"echo using {secret}", "password": secret})
    assert job["state"] == "success", job
    [task] = commands(job)
    shown = json.dumps(env.client.get(f"/environments/{env.id}/jobs/{job['id']}"))
    assert "using ***" in "\n".join(task["log"]) + task["summary"], task
    assert secret not in shown, [line for line in shown.split(", ") if secret in line]
