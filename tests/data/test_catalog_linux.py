"""The Linux service types of the catalog: linuxWebServer, linuxApp, linuxWebServerFarm,
linuxAppFarm.

End to end through the REST API on the local cloud (folder broker + SQLite, real
agents): each type deploys and answers -- the static site on its port, the app on
its health URL, a farm through its load balancer, spreading requests over its
units -- then one unit is added through a configuration session and the
environment is deployed again: the new unit answers (and is registered with the
farm's load balancer) while the existing units are not touched (same agent
process, same journal, same server process).  Deleting the environment leaves no
process behind.

Also: simulated runs of the example models (``fornace workflow simulate``), and
the plan scripts on their own (git sources, failures, the reverse proxy).
"""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any

import pytest

from fornace.api import specs
from fornace.cli.client.http import ApiClient
from apikit import free_port
from fornace.cli.demo import Demo
from fornace.cli.main import main
from fornace.cli.onebox import OneBox
from localkit import alive, instance_processes, processes_with, running_onebox

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "data" / "templates" / "agent" / "scripts"
EXAMPLES = ROOT / "data" / "examples"
HELLO = EXAMPLES / "apps" / "hello"
TIMEOUT = 120.0


# ------------------------------------------------------------------ helpers

def fetch(url: str, data: bytes | None = None) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, dict(answer.headers), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    """One Fornace for the module's tests (each test has its own environment)."""
    yield from running_onebox(tmp_path_factory.mktemp("catalog") / "state", agent_timeout=90)


@pytest.fixture
def environment(box):
    """A new environment; its units are stopped at the end even when the test failed."""
    env = Environment(box)
    try:
        yield env
    finally:
        if env.stack in box.cloud.stack_names():
            box.cloud.delete(env.stack)


class Environment:
    """One environment driven through the REST API, as a user would."""

    def __init__(self, box: OneBox) -> None:
        self.box = box
        self.client = ApiClient(box.url)
        self.demo = Demo(self.client, lambda text: None, TIMEOUT)
        # names are unique in a tenant, and the module's tests share one Fornace
        self.id = self.client.post("/environments",
                                   {"name": f"catalog-{os.urandom(4).hex()}"})["id"]
        self.demo.env_id = self.id
        self.stack = f"e{self.id}"

    def deploy(self, edit) -> dict[str, Any]:
        """Open a session, ``edit(session)`` it, deploy, wait for the end."""
        session = self.client.post(f"/environments/{self.id}/configure")["id"]
        edit(session)
        self.client.post(f"/environments/{self.id}/sessions/{session}/deploy")
        body = self.demo.follow(lambda b: b is not None
                                and b["status"] not in ("deploying", "pending"))
        assert body["status"] == "ready", self.texts()
        return body

    def add_service(self, service: dict[str, Any]) -> dict[str, Any]:
        return self.deploy(lambda session: self.client.post(
            f"/environments/{self.id}/services", service, session=session))

    def add_unit(self, service_id: str) -> dict[str, Any]:
        return self.deploy(lambda session: self.client.post(
            f"/environments/{self.id}/services/{service_id}/units", [{}], session=session))

    def reports(self) -> list[dict[str, Any]]:
        """The reports of the latest deployment."""
        latest = self.client.get(f"/environments/{self.id}/deployments")["deployments"][0]
        return self.client.get(
            f"/environments/{self.id}/deployments/{latest['id']}")["reports"]

    def texts(self) -> list[str]:
        return [r["text"] for r in self.reports()]

    def errors(self) -> list[str]:
        return [r["text"] for r in self.reports() if r["level"] == "error"]

    def sandbox(self, instance: str) -> Path:
        return self.box.cloud.state_dir / self.stack / instance

    def snapshot(self, instance: str, server_pid_file: str) -> dict[str, Any]:
        """What must not change on a unit that a deployment leaves alone."""
        info = self.box.cloud.instances(self.stack)[instance]
        work = self.sandbox(instance) / "work"
        return {"agent": (info["pid"], info["start_time"]), "running": info["running"],
                "journal": (work / "journal.jsonl").read_bytes(),
                "plans": sorted(p.name for p in (work / "plans").iterdir()),
                "server": (work / server_pid_file).read_text()}

    def delete(self) -> None:
        tokens = [i["token"] for i in self.box.cloud.instances(self.stack).values()]
        assert tokens and all(instance_processes(t) for t in tokens)
        self.demo.delete()
        assert self.stack not in self.box.cloud.stack_names()
        assert not any(instance_processes(t) for t in tokens)


def through_proxy(url: str, count: int) -> list[tuple[str, str]]:
    """(X-Fornace-Backend, body) of ``count`` GETs through a load balancer."""
    answers = []
    for _ in range(count):
        status, headers, body = fetch(url)
        assert status == 200, (status, body)
        answers.append((headers["X-Fornace-Backend"], body))
    return answers


SERVER_PID = {"linuxWebServer": "site-server.pid", "linuxWebServerFarm": "site-server.pid",
              "linuxApp": "app.pid", "linuxAppFarm": "app.pid"}


def service_body(kind: str, site_port: int, lb_port: int) -> dict[str, Any]:
    base = {"name": f"{kind}-svc", "type": kind, "osImage": {"name": "local", "type": "linux"},
            "unitNamingPattern": "u#"}
    app = {"source": str(HELLO), "startCommand": "python3 app.py", "port": site_port,
           "healthPath": "/health", "env": {"GREETING": "Howdy"}}
    farm = {"loadBalancerPort": lb_port}
    return {"linuxWebServer": {**base, "port": site_port, "units": [{}]},
            "linuxApp": {**base, **app, "units": [{}]},
            "linuxWebServerFarm": {**base, "port": site_port, **farm, "units": [{}, {}]},
            "linuxAppFarm": {**base, **app, **farm, "units": [{}, {}]}}[kind]


def check_unit_answers(kind: str, service: dict[str, Any], unit: dict[str, Any],
                       port: int) -> None:
    state = unit["state"]
    host = state["hostname"]
    if kind in ("linuxWebServer", "linuxWebServerFarm"):
        assert state["siteDeployed"] is True
        assert state["url"] == f"http://{state['address']}:{port}/"   # shown as an output
        status, _, page = fetch(state["url"])
        assert status == 200
        assert f"<h1>{service['name']}</h1>" in page and f"Served by {host}" in page
    else:
        assert state["appDeployed"] is True
        assert state["url"] == f"http://{state['address']}:{port}/"   # the app's, not /health
        assert fetch(state["url"])[2] == f"Howdy from {host}\n"
        assert fetch(f"http://{state['address']}:{port}/health")[::2] == (200, "ok\n")


# ------------------------------------------------------------ end to end, per type

@pytest.mark.parametrize("kind", ["linuxWebServer", "linuxApp", "linuxWebServerFarm",
                                  "linuxAppFarm"])
def test_a_linux_type_deploys_answers_and_scales_out_without_touching_its_units(environment,
                                                                              kind):
    site_port, lb_port = free_port(), free_port()
    env = environment
    farm = kind.endswith("Farm")

    # -- the first deployment: every unit answers (through the load balancer for farms)
    body = env.add_service(service_body(kind, site_port, lb_port))
    service = body["services"][0]
    units = service["units"]
    hosts = [u["state"]["hostname"] for u in units]
    assert hosts == (["u1", "u2"] if farm else ["u1"])
    for unit in units:
        check_unit_answers(kind, service, unit, site_port)
    texts = env.texts()
    assert not env.errors()
    if farm:
        state = service["state"]
        assert state["proxyHostname"] == "u1-lb" and state["proxyPort"] == lb_port
        proxy_url = f"http://{state['address']}:{lb_port}/"
        assert state["url"] == proxy_url
        assert state["address"] not in [u["state"]["address"] for u in units]
        assert f"Farm {service['name']} answers on {proxy_url}" == texts[-1]
        assert all(u["state"]["registered"] is True for u in units)
        answers = through_proxy(proxy_url, 4)
        assert sorted(name for name, _ in answers) == ["u1", "u1", "u2", "u2"]
        for name, text in answers:          # each answer comes from the unit it names
            assert (f"Served by {name}" in text) if kind == "linuxWebServerFarm" \
                else text == f"Howdy from {name}\n"
        if kind == "linuxAppFarm":          # request bodies are forwarded
            status, headers, text = fetch(f"{proxy_url}echo", b"ping")
            assert status == 200 and text == f"{headers['X-Fornace-Backend']} echoes: ping\n"
    else:
        assert texts[-1] == f"Service {service['name']} is ready"

    # -- scale out: one more unit, deployed again
    server = SERVER_PID[kind]
    before = {h: env.snapshot(h, server) for h in hosts}
    if farm:
        proxy_before = env.snapshot("u1-lb", "proxy/proxy.pid")
    body = env.add_unit(service["id"])
    assert body["version"] == 2
    service = body["services"][0]
    units = service["units"]
    new = units[-1]
    new_host = "u3" if farm else "u2"
    assert [u["state"]["hostname"] for u in units] == hosts + [new_host]
    check_unit_answers(kind, service, new, site_port)
    assert not env.errors()

    # the existing units were left alone: same agent process, no new plan, same server
    after = {h: env.snapshot(h, server) for h in hosts}
    assert after == before
    assert all(s["running"] for s in after.values())
    for unit in units[:-1]:
        check_unit_answers(kind, service, unit, site_port)
    texts = env.texts()
    deploying = [t for t in texts if t.startswith("Deploying")]
    assert len(deploying) == 1 and deploying[0].endswith(f" on {new_host}")
    assert texts.count(f"Instance {new_host} ({new['name']}) created") == 1

    if farm:
        # the load balancer kept running; only the new unit was registered with it
        proxy_after = env.snapshot("u1-lb", "proxy/proxy.pid")
        assert proxy_after["agent"] == proxy_before["agent"]
        assert proxy_after["server"] == proxy_before["server"]
        assert len(proxy_after["plans"]) == len(proxy_before["plans"]) + 1
        assert [t for t in texts if t.startswith("Registering")] == [
            f"Registering {new_host} with the load balancer of {service['name']}"]
        backends = json.loads((env.sandbox("u1-lb") / "work" / "proxy" /
                               "backends.json").read_text())["backends"]
        assert [b["name"] for b in backends] == ["u1", "u2", "u3"]
        assert backends[2]["url"] == f"http://{new['state']['address']}:{site_port}"
        answers = through_proxy(service["state"]["url"], 6)
        assert sorted(name for name, _ in answers) == ["u1", "u1", "u2", "u2", "u3", "u3"]
        assert texts[-1] == f"Farm {service['name']} answers on {service['state']['url']}"
    else:
        assert texts[-1] == f"Service {service['name']} is ready"

    env.delete()


def test_a_failing_app_is_reported_and_retried_by_the_next_deployment(environment):
    """A start command that exits: the unit fails with the app's log in the error
    report; after the service is fixed, the next deployment deploys it again."""
    port = free_port()
    env = environment
    body = {"name": "broken", "type": "linuxApp", "osImage": "local", "source": str(HELLO),
            "startCommand": "echo missing-dependency >&2; exit 7", "port": port,
            "units": [{}]}
    session = env.client.post(f"/environments/{env.id}/configure")["id"]
    service_id = env.client.post(f"/environments/{env.id}/services", body,
                                 session=session)["id"]
    env.client.post(f"/environments/{env.id}/sessions/{session}/deploy")
    # the job's end and its error report come on two queues in no common order:
    # the environment is read again once both are stored
    env.demo.follow(lambda b: b is not None and b["status"] not in ("deploying", "pending")
                    and bool(env.errors()))
    result = env.client.get(f"/environments/{env.id}")
    assert result["status"] == "deploy failure"
    [error] = env.errors()
    assert error.startswith("Deployment of broken on ")
    assert "exited with code 7" in error and "missing-dependency" in error
    assert result["services"][0]["units"][0]["state"]["failed"] is True

    fixed = env.deploy(lambda session: env.client.request(
        "PUT", f"/environments/{env.id}/services/{service_id}/startCommand",
        "python3 app.py", {"X-Configuration-Session": session}))
    state = fixed["services"][0]["units"][0]["state"]
    assert state["appDeployed"] is True and state["failed"] is False
    assert state["url"] == f"http://{state['address']}:{port}/"      # healthPath: /
    assert fetch(state["url"])[::2] == (200, f"Hello from {state['hostname']}\n")
    texts = env.texts()
    assert any(t.startswith("Retrying ") for t in texts)
    env.delete()


# ------------------------------------------------------------ simulated runs

def simulate(capsys, model: Path, *extra: str, status: str = "success") -> dict[str, Any]:
    """``fornace workflow simulate --json``; ``status``: how the run must end (error
    reports end it completed_w_errors, exit status 1, as the API ends such a job)."""
    code = main(["workflow", "simulate", "--model", str(model), "--json", *extra])
    out, _ = capsys.readouterr()
    doc = json.loads(out)
    assert code == (0 if status == "success" else 1) and doc["status"] == status, out
    return doc


@pytest.mark.parametrize("name", ["linux-web.json", "linux-app.json", "linux-farm.json"])
def test_the_examples_are_valid_api_services(name):
    for service in json.loads((EXAMPLES / name).read_text())["services"]:
        specs.validate_create(service)


def actions(doc: dict[str, Any]) -> list[list[tuple]]:
    return [[(a["kind"], a["template"], a["unit"]) for a in r["actions"]]
            for r in doc["rounds"] if r["actions"]]


@pytest.mark.parametrize("example", ["linux-web.json", "linux-farm.json"])
def test_an_os_image_given_by_name_alone_is_the_instances_image(capsys, tmp_path, example):
    """``osImage`` may be a name (the schema takes a string or an object): the
    instances boot from it as from ``{"name": ...}``."""
    model = json.loads((EXAMPLES / example).read_text())
    for service in model["services"]:
        service["osImage"] = "debian-12"
    given = tmp_path / example
    given.write_text(json.dumps(model))
    doc = simulate(capsys, given, "--result", 'Linux/DeployProxy="http://lb/"')
    images = {a["mappings"]["instanceName"]: a["mappings"]["imageName"]
              for r in doc["rounds"] for a in r["actions"] if a["kind"] == "update-cf-stack"}
    assert images and set(images.values()) == {"debian-12"}, images


def test_simulated_linux_app_example(capsys, tmp_path):
    doc = simulate(capsys, EXAMPLES / "linux-app.json",
                   "--result", 'Linux/DeployApp="http://10.0.0.1:8000/"')
    assert actions(doc) == [
        [("update-cf-stack", "LinuxInstance", None)] * 2,
        [("send-command", "Linux/DeployApp", "unit0101"),
         ("send-command", "Linux/DeployApp", "unit0102")]]
    plan = doc["rounds"][1]["actions"][0]["mappings"]
    assert plan == {"name": "hello", "source": "/opt/fornace/data/examples/apps/hello",
                    "revision": "", "startCommand": "python3 app.py", "port": 8000,
                    "healthPath": "/health", "env": {"GREETING": "Hello"},
                    "hostname": "app1", "address": "", "startTimeout": "60"}
    texts = [r["text"] for r in doc["reports"]]
    assert "hello deployed on app1: answers on http://10.0.0.1:8000/" in texts
    assert texts[-1] == "Service hello is ready"

    # deployed again with one more unit: only that unit gets the app
    model = doc["model"]
    model["services"][0]["units"].append({"id": "unit0103", "name": "hello_instance_2"})
    again = tmp_path / "again.json"
    again.write_text(json.dumps(model))
    doc = simulate(capsys, again)
    assert actions(doc) == [[("update-cf-stack", "LinuxInstance", None)] * 3,
                            [("send-command", "Linux/DeployApp", "unit0103")]]

    # a changed start command deploys every unit again
    model = doc["model"]
    model["services"][0]["startCommand"] = "python3 -u app.py"
    again.write_text(json.dumps(model))
    doc = simulate(capsys, again)
    assert actions(doc)[1] == [("send-command", "Linux/DeployApp", u)
                               for u in ("unit0101", "unit0102", "unit0103")]
    assert "The settings of hello changed: its units deploy it again" in [
        r["text"] for r in doc["reports"]]


def test_simulated_linux_farm_example(capsys, tmp_path):
    outputs = {"hello1": "10.0.1.1", "hello2": "10.0.1.2", "hello1-lb": "10.0.1.10",
               "site1": "10.0.2.1", "site2": "10.0.2.2", "site1-lb": "10.0.2.10"}
    doc = simulate(capsys, EXAMPLES / "linux-farm.json", "--outputs", json.dumps(outputs),
                   "--result", 'Linux/DeployProxy="http://lb/"')
    assert actions(doc) == [
        [("update-cf-stack", "LinuxInstance", None)] * 6,
        [("send-command", "Linux/DeployApp", "unit0201"),
         ("send-command", "Linux/DeployApp", "unit0202"),
         ("send-command", "Linux/DeployProxy", "farm0001-proxy"),
         ("send-command", "Linux/DeployProxy", "farm0002-proxy"),
         ("send-command", "Linux/DeployStaticSite", "unit0301"),
         ("send-command", "Linux/DeployStaticSite", "unit0302")],
        [("send-command", "Linux/RegisterBackend", "farm0001-proxy")] * 2
        + [("send-command", "Linux/RegisterBackend", "farm0002-proxy")] * 2]
    stack = {a["mappings"]["instanceName"]: a["mappings"] for a in doc["rounds"][0]["actions"]}
    assert sorted(stack) == ["hello1", "hello1-lb", "hello2", "site1", "site1-lb", "site2"]
    config = base64.b64decode(re.search(r"echo '([A-Za-z0-9+/=]+)' \| base64 -d",
                                        stack["hello1-lb"]["userData"]).group(1)).decode()
    assert "input_queue = edemo0003-farm0001-farm0001-proxy" in config  # its own queue
    proxies = [a["mappings"] for a in doc["rounds"][1]["actions"]
               if a["template"] == "Linux/DeployProxy"]
    assert proxies == [{"port": 8080, "name": "hello-farm", "address": "10.0.1.10"},
                       {"port": 8081, "name": "site-farm", "address": "10.0.2.10"}]
    registered = [a["mappings"] for a in doc["rounds"][2]["actions"]]
    assert registered == [{"name": "hello1", "url": "http://10.0.1.1:8000"},
                          {"name": "hello2", "url": "http://10.0.1.2:8000"},
                          {"name": "site1", "url": "http://10.0.2.1:8080"},
                          {"name": "site2", "url": "http://10.0.2.2:8080"}]
    farm = doc["model"]["services"][0]
    assert farm["state"]["address"] == "10.0.1.10" and farm["state"]["proxyPort"] == 8080
    texts = [r["text"] for r in doc["reports"]]
    assert texts[-2:] == ["Farm hello-farm answers on http://lb/",
                          "Farm site-farm answers on http://lb/"]

    # one more unit in the site farm: it alone is deployed and registered
    model = doc["model"]
    model["services"][1]["units"].append({"id": "unit0303", "name": "site-farm_instance_2"})
    again = tmp_path / "again.json"
    again.write_text(json.dumps(model))
    doc = simulate(capsys, again, "--outputs", json.dumps({**outputs, "site3": "10.0.2.3"}))
    assert actions(doc) == [
        [("update-cf-stack", "LinuxInstance", None)] * 7,
        [("send-command", "Linux/DeployStaticSite", "unit0303")],
        [("send-command", "Linux/RegisterBackend", "farm0002-proxy")]]
    assert doc["rounds"][2]["actions"][0]["mappings"] == {"name": "site3",
                                                          "url": "http://10.0.2.3:8080"}


def test_simulated_failures_are_reported_and_retried_once_per_deployment(capsys, tmp_path):
    doc = simulate(capsys, EXAMPLES / "linux-farm.json", "--fail", "Linux/DeployApp:hello2",
                   "--fail", "Linux/DeployProxy:farm0002-proxy", status="completed_w_errors")
    errors = [r for r in doc["reports"] if r["level"] == "error"]
    assert [(r["entity"], r["text"].split(":")[0]) for r in errors] == [
        ("unit", "Deployment of hello-farm on hello2 failed"),
        ("service", "The load balancer of site-farm could not start on site1-lb")]
    texts = [r["text"] for r in doc["reports"]]
    assert not any(t.startswith("Farm ") for t in texts)
    again = tmp_path / "again.json"
    again.write_text(json.dumps(doc["model"]))
    doc = simulate(capsys, again)
    sent = [a for r in actions(doc) for a in r if a[0] == "send-command"]
    assert sent == [("send-command", "Linux/DeployApp", "unit0202"),
                    ("send-command", "Linux/DeployProxy", "farm0002-proxy"),
                    ("send-command", "Linux/RegisterBackend", "farm0001-proxy"),
                    ("send-command", "Linux/RegisterBackend", "farm0002-proxy"),
                    ("send-command", "Linux/RegisterBackend", "farm0002-proxy")]
    texts = [r["text"] for r in doc["reports"]]
    assert "Retrying hello2, which failed in an earlier deployment" in texts
    assert texts[-2:] == ["Farm hello-farm answers on ok", "Farm site-farm answers on ok"]


# ------------------------------------------------------------ the plan scripts alone

@pytest.fixture
def work(tmp_path):
    """A unit's work dir; every server a script started there is stopped at the end."""
    folder = tmp_path / "work"
    folder.mkdir()
    yield folder
    for pid_file in list(folder.rglob("*.pid")):
        try:
            record = json.loads(pid_file.read_text())
            os.killpg(record["pgid"], signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass


def run_script(name: str, work: Path, args: dict[str, Any],
               path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "FORNACE_WORK_DIR": str(work), "FORNACE_INSTANCE_ADDRESS": "127.0.0.1",
           "PYTHONDONTWRITEBYTECODE": "1"}           # nothing written next to the scripts
    if path is not None:
        env["PATH"] = path
    env.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in args.items()})
    return subprocess.run([sys.executable, str(SCRIPTS / name)], input=json.dumps(args),
                          capture_output=True, text=True, cwd=work, env=env, timeout=60)


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                   cwd=cwd, check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_an_app_from_a_git_url_is_cloned_then_fetched(tmp_path, work):
    repo = tmp_path / "repo"
    shutil.copytree(HELLO, repo)
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", ".", cwd=repo)
    git("commit", "-q", "-m", "v1", cwd=repo)
    port = free_port()
    args = {"name": "hello", "source": f"file://{repo}", "startCommand": "python3 app.py",
            "port": port, "healthPath": "/health", "hostname": "g1", "env": {}}
    done = run_script("deploy_linux_app.py", work, args)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"http://127.0.0.1:{port}/\n"   # the app's URL, not its health
    assert fetch(f"http://127.0.0.1:{port}/")[2] == "Hello from g1\n"
    first = json.loads((work / "app.pid").read_text())["pid"]

    app = (repo / "app.py").read_text().replace('or "Hello"', 'or "Hi"')
    (repo / "app.py").write_text(app)
    git("commit", "-q", "-am", "v2", cwd=repo)
    done = run_script("deploy_linux_app.py", work, args)
    assert done.returncode == 0, done.stderr
    assert fetch(f"http://127.0.0.1:{port}/")[2] == "Hi from g1\n"
    assert not alive(first)
    assert json.loads((work / "app.pid").read_text())["pid"] != first

    # a revision: the first commit again
    git("tag", "v1", "HEAD~1", cwd=repo)
    done = run_script("deploy_linux_app.py", work, {**args, "revision": "v1"})
    assert done.returncode == 0, done.stderr
    assert fetch(f"http://127.0.0.1:{port}/")[2] == "Hello from g1\n"


def test_app_script_failures_are_clear(tmp_path, work):
    port = free_port()
    args = {"name": "hello", "source": "https://git.example.com/hello.git",
            "startCommand": "python3 app.py", "port": port}
    no_git = tmp_path / "empty-bin"
    no_git.mkdir()
    done = run_script("deploy_linux_app.py", work, args, path=str(no_git))
    assert done.returncode == 1
    assert "git is not installed on this unit" in done.stderr
    assert "https://git.example.com/hello.git" in done.stderr

    done = run_script("deploy_linux_app.py", work, {**args, "source": str(tmp_path / "nope")})
    assert done.returncode == 1 and "does not exist on this unit" in done.stderr

    # never answers: stopped after startTimeout, with the end of its log
    done = run_script("deploy_linux_app.py", work, {
        **args, "source": str(HELLO), "startCommand": "echo starting slowly; exec sleep 60",
        "startTimeout": 1, "hostname": "s1"})
    assert done.returncode == 1
    assert f"hello on s1: http://127.0.0.1:{port}/ did not answer" in done.stderr
    assert "within 1 s" in done.stderr and "starting slowly" in done.stderr
    assert not (work / "app.pid").exists()
    assert not processes_with(f"FORNACE_WORK_DIR={work}")      # the app was stopped


class _Backend(ThreadingMixIn, HTTPServer):
    daemon_threads = True


def backend(name: str) -> _Backend:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self):
            size = int(self.headers.get("Content-Length") or 0)
            data = f"{name} {self.command} {self.path} {self.rfile.read(size).decode()}"
            self.send_response(201 if self.command == "POST" else 200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data.encode())
        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _answer

    server = _Backend(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_the_load_balancer_spreads_requests_skips_dead_units_and_rereads_its_list(work):
    proxy_port = free_port()
    folder = work / "proxy"
    plan = work / "plan"
    plan.mkdir()
    for name in ("deploy_proxy.py", "fornace_proxy.py", "fornace_unit.py"):
        shutil.copy(SCRIPTS / name, plan / name)
    env = {**os.environ, "FORNACE_WORK_DIR": str(work), "FORNACE_INSTANCE_ADDRESS": "127.0.0.1"}
    done = subprocess.run([sys.executable, str(plan / "deploy_proxy.py")],
                          input=json.dumps({"port": proxy_port, "name": "f"}),
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    url = done.stdout.strip()
    assert url == f"http://127.0.0.1:{proxy_port}/"
    assert fetch(url)[0] == 503                      # nothing registered yet

    a, b = backend("a"), backend("b")
    dead = free_port()                               # refuses connections
    try:
        for name, port in (("a", a.server_address[1]), ("dead", dead),
                           ("b", b.server_address[1])):
            done = run_script("register_backend.py", work,
                              {"name": name, "url": f"http://127.0.0.1:{port}"})
            assert done.returncode == 0, done.stderr
        assert "3 backend(s)" in done.stdout
        seen = [fetch(f"{url}x?y=1")[1]["X-Fornace-Backend"] for _ in range(6)]
        assert sorted(seen) == ["a", "a", "a", "b", "b", "b"]
        status, headers, text = fetch(f"{url}form", b"k=v")
        assert status == 201 and text == f"{headers['X-Fornace-Backend']} POST /form k=v"

        a.shutdown()
        a.server_close()
        assert {fetch(url)[1]["X-Fornace-Backend"] for _ in range(4)} == {"b"}
        b.shutdown()
        b.server_close()
        assert fetch(url)[0] == 502

        c = backend("c")                             # a re-registered unit: new URL
        done = run_script("register_backend.py", work,
                          {"name": "b", "url": f"http://127.0.0.1:{c.server_address[1]}"})
        assert done.returncode == 0 and "3 backend(s)" in done.stdout
        assert fetch(url)[1]["X-Fornace-Backend"] == "b"
        assert fetch(url)[2].startswith("c GET / ")
        c.shutdown()
        c.server_close()
    finally:
        for server in (a, b):
            server.server_close()
    bad = run_script("register_backend.py", work, {"name": "x", "url": "$url"})
    assert bad.returncode == 1 and "is not an http://address:port URL" in bad.stderr
    assert (folder / "proxy.log").read_text().count("backend dead") >= 1
