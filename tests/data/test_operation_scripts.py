"""The Linux lifecycle operations of the type catalog, run for real on this machine.

Each unit is a work dir and a loopback address of its own (as on the local
cloud).  Its site, app or load balancer is started by the deploy scripts with
the mappings the workflows give them; then each operation of
``data/types.json`` is turned into the plan the agent would get (inputs
rendered at the unit, ``operation_kwargs`` added, ``build_plan``) and every
command of that plan is run as the agent runs it: ``python3 <script>`` in the
plan's folder with the arguments as environment variables and as JSON on
stdin (agent/README.md).
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fornace.common.catalog import load_catalog, render, truthy, unit_cursor
from fornace.conductor.plans import build_plan
from fornace.conductor.templates import TemplateStore
from waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data"
SCRIPTS = DATA / "templates" / "agent" / "scripts"
HELLO = DATA / "examples" / "apps" / "hello"
CATALOG = load_catalog(DATA / "types.json")
STORE = TemplateStore(DATA)
PYTHON = shutil.which("python3") or sys.executable     # the agent's [agent] python


# ------------------------------------------------------------------ units and plans

def free_port(address: str) -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


@dataclass
class Done:
    """What the agent would answer for one plan: each command's exit code and output."""
    commands: list[subprocess.CompletedProcess]

    @property
    def ok(self) -> bool:
        return all(c.returncode == 0 for c in self.commands)

    @property
    def last(self) -> subprocess.CompletedProcess:
        return self.commands[-1]

    def lines(self, index: int = -1) -> list[str]:
        return self.commands[index].stdout.splitlines()

    def verdict(self) -> dict[str, Any]:
        """The JSON line of a check (the last line of its output)."""
        return json.loads(self.lines()[-1])


class Cloud:
    """Units of a test: a work dir and an address each; every server they started is
    killed at the end (``close``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.addresses: dict[str, str] = {}
        self.count = 0

    def unit(self, unit_id: str) -> str:
        self.count += 1
        address = f"127.0.{os.getpid() % 200 + 20}.{self.count + 10}"
        self.addresses[unit_id] = address
        (self.root / unit_id).mkdir()
        return address

    def work(self, unit_id: str) -> Path:
        return self.root / unit_id

    def run_plan(self, unit_id: str, template: str, mappings: dict[str, Any]) -> Done:
        """Build the plan and run its commands on the unit as the agent does."""
        plan = build_plan(STORE, template, mappings)
        work = self.work(unit_id)
        folder = work / "plans" / f"{time.monotonic_ns()}"
        folder.mkdir(parents=True)
        for name, content in zip(plan["ScriptNames"], plan["Scripts"]):
            (folder / name).write_bytes(base64.b64decode(content))
        done = []
        for index, command in enumerate(plan["Commands"]):
            arguments = command["Arguments"]
            env = {**os.environ, "FORNACE_WORK_DIR": str(work), "FORNACE_PLAN_DIR": str(folder),
                   "FORNACE_PLAN_ID": "test", "FORNACE_COMMAND_INDEX": str(index),
                   "FORNACE_INSTANCE_ADDRESS": self.addresses[unit_id],
                   "PYTHONDONTWRITEBYTECODE": "1"}
            env.update({k: v if isinstance(v, str) else "" if v is None else json.dumps(v)
                        for k, v in arguments.items()})
            result = subprocess.run([PYTHON, str(folder / command["Name"])],
                                    input=json.dumps(arguments), capture_output=True,
                                    text=True, cwd=work, env=env, timeout=120)
            done.append(result)
            if result.returncode != 0:
                break
        return Done(done)

    def close(self) -> None:
        for pid_file in self.root.rglob("*.pid"):
            try:
                os.killpg(json.loads(pid_file.read_text())["pgid"], signal.SIGKILL)
            except (OSError, ValueError, KeyError):
                pass


@pytest.fixture
def cloud(tmp_path):
    units = Cloud(tmp_path)
    yield units
    units.close()


def operate(cloud: Cloud, model: dict[str, Any], service_id: str, unit_id: str, name: str,
            **kwargs: Any) -> Done:
    """Run an operation of the catalog on a unit, as execute_operation sends it."""
    service = next(s for s in model["services"] if s["id"] == service_id)
    operation = CATALOG.operation(service["type"], name)
    cursor = unit_cursor(model, service_id, unit_id)
    mappings = render(operation.inputs, cursor)
    for key, value in kwargs.items():
        assert mappings.get(key) is None, f"{name}: kwarg {key} overrides an input"
        mappings[key] = value
    target = str(render(operation.unit, cursor)) if operation.unit else unit_id
    return cloud.run_plan(target, operation.template, mappings)


def unlink(cloud: Cloud, model: dict[str, Any], service_id: str, unit_id: str) -> list[Done]:
    service = next(s for s in model["services"] if s["id"] == service_id)
    cursor = unit_cursor(model, service_id, unit_id)
    done = []
    for operation in CATALOG.unlink(service["type"]):
        if truthy(cursor, operation.when):
            target = str(render(operation.unit, cursor)) if operation.unit else unit_id
            done.append(cloud.run_plan(target, operation.template,
                                       render(operation.inputs, cursor)))
    return done


def fetch(url: str) -> tuple[int, dict[str, str], str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, dict(answer.headers), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def pid_of(cloud: Cloud, unit_id: str, pid_file: str) -> int:
    return json.loads((cloud.work(unit_id) / pid_file).read_text())["pid"]


# ------------------------------------------------------------------ models

def web_service(cloud: Cloud, kind: str = "linuxWebServer", units: int = 1) -> dict[str, Any]:
    """A deployed static site: its units serve it (deploy_static_site.py)."""
    port = None
    service: dict[str, Any] = {"id": "web", "name": "Lifecycle site", "type": kind,
                               "units": []}
    for index in range(units):
        unit_id = f"web-u{index}"
        address = cloud.unit(unit_id)
        port = port or free_port(address)
        service["units"].append({"id": unit_id, "name": f"site_instance_{index}",
                                 "state": {"hostname": f"web{index}", "address": address,
                                           "siteDeployed": True}})
        done = cloud.run_plan(unit_id, "Linux/DeployStaticSite", {
            "port": port, "title": service["name"], "hostname": f"web{index}"})
        assert done.ok, done.last.stderr
    service["port"] = port
    return service


def app_service(cloud: Cloud, start_command: str = "python3 app.py") -> dict[str, Any]:
    """A deployed app (deploy_linux_app.py) with the settings the workflow records."""
    address = cloud.unit("app-u0")
    settings = {"source": str(HELLO), "revision": None, "startCommand": start_command,
                "port": free_port(address), "healthPath": "/health",
                "env": {"GREETING": "Howdy"}, "startTimeout": 30}
    service = {"id": "app", "name": "hello", "type": "linuxApp", **settings,
               "state": {"appSettings": settings},
               "units": [{"id": "app-u0", "name": "hello_instance_0",
                          "state": {"hostname": "app1", "address": address,
                                    "appDeployed": True}}]}
    done = cloud.run_plan("app-u0", "Linux/DeployApp", {
        "name": "hello", "source": str(HELLO), "revision": "", "startCommand": start_command,
        "port": settings["port"], "healthPath": "/health", "env": settings["env"],
        "hostname": "app1", "address": address, "startTimeout": 30})
    assert done.ok, done.last.stderr
    return service


def environment(*services: dict[str, Any]) -> dict[str, Any]:
    return {"id": "env1", "name": "ops", "services": list(services)}


def site_url(service: dict[str, Any], index: int = 0) -> str:
    return f"http://{service['units'][index]['state']['address']}:{service['port']}/"


# ------------------------------------------------------------------ tests

def test_static_site_check_stop_start_restart(cloud):
    service = web_service(cloud)
    model = environment(service)
    url = site_url(service)

    check = operate(cloud, model, "web", "web-u0", "check")
    assert check.ok and check.verdict()["status"] == "ok"
    assert check.verdict()["detail"].startswith(f"{url} answers HTTP 200")
    assert len(check.lines()) == 1

    stop = operate(cloud, model, "web", "web-u0", "stop")
    assert stop.ok and stop.lines()[-1].endswith("stopped")
    again = operate(cloud, model, "web", "web-u0", "stop")
    assert again.ok and again.lines() == ["the web server was not running"]

    check = operate(cloud, model, "web", "web-u0", "check")
    assert check.last.returncode == 1
    verdict = check.verdict()
    assert verdict["status"] == "error" and "no answer on " + url in verdict["detail"]
    assert json.loads(check.last.stderr.splitlines()[-1]) == verdict   # quoted by the agent

    start = operate(cloud, model, "web", "web-u0", "start")
    assert start.ok and start.lines()[-1].endswith(url), start.last.stderr
    first = pid_of(cloud, "web-u0", "site-server.pid")
    status, _, page = fetch(url)
    assert status == 200 and "<h1>Lifecycle site</h1>" in page and "Served by web0" in page
    assert operate(cloud, model, "web", "web-u0", "check").verdict()["status"] == "ok"

    start = operate(cloud, model, "web", "web-u0", "start")        # idempotent
    assert start.ok and "already running (pid {})".format(first) in start.lines()[-1]

    restart = operate(cloud, model, "web", "web-u0", "restart")
    assert restart.ok and [len(c.stdout.splitlines()) for c in restart.commands] == [1, 1]
    assert pid_of(cloud, "web-u0", "site-server.pid") != first
    assert fetch(url)[0] == 200


def test_a_check_tells_degraded_from_error(cloud):
    service = web_service(cloud)
    model = environment(service)
    address, port = service["units"][0]["state"]["address"], service["port"]

    missing = cloud.run_plan("web-u0", "Linux/CheckServer", {
        "server": "site", "address": address, "port": port, "path": "/missing.html"})
    assert missing.ok and missing.verdict()["status"] == "degraded"
    assert "answers HTTP 404" in missing.verdict()["detail"]

    # the deployed server is gone but another process serves the port
    assert operate(cloud, model, "web", "web-u0", "stop").ok
    other = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", address,
                              "--directory", str(cloud.work("web-u0") / "site")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def listening() -> bool:
            try:
                socket.create_connection((address, port), timeout=1).close()
                return True
            except OSError:
                return False
        wait_for(listening, f"the other server to listen on {address}:{port}")
        check = operate(cloud, model, "web", "web-u0", "check")
        assert check.ok and check.verdict()["status"] == "degraded"
        assert "the web server is not running (no site-server.pid)" in check.verdict()["detail"]
        start = operate(cloud, model, "web", "web-u0", "start")   # the port is taken
        assert start.last.returncode == 1 and "did not start" in start.last.stderr
    finally:
        other.kill()
        other.wait()

    bad = cloud.run_plan("web-u0", "Linux/CheckServer", {"server": "db", "port": port})
    assert bad.last.returncode == 1 and bad.verdict() == {
        "status": "error", "detail": "argument server must be one of app, proxy, site "
                                     "(got 'db')"}


def test_app_check_stop_start_restart(cloud):
    service = app_service(cloud)
    model = environment(service)
    state = service["units"][0]["state"]
    health = f"http://{state['address']}:{service['port']}/health"

    check = operate(cloud, model, "app", "app-u0", "check")
    assert check.ok and check.verdict() == {
        "status": "ok", "detail": f"{health} answers HTTP 200; the application runs as pid "
                                  f"{pid_of(cloud, 'app-u0', 'app.pid')}"}

    assert operate(cloud, model, "app", "app-u0", "stop").ok
    check = operate(cloud, model, "app", "app-u0", "check")
    assert check.last.returncode == 1 and check.verdict()["status"] == "error"

    start = operate(cloud, model, "app", "app-u0", "start")
    assert start.ok, start.last.stderr
    assert start.lines()[-1].endswith(health)
    info = json.loads(fetch(f"http://{state['address']}:{service['port']}/info")[2])
    assert info["greeting"] == "Howdy" and info["unit"] == "app1"     # env, hostname again
    assert operate(cloud, model, "app", "app-u0", "check").verdict()["status"] == "ok"

    restart = operate(cloud, model, "app", "app-u0", "restart")
    assert restart.ok, restart.last.stderr
    again = json.loads(fetch(f"http://{state['address']}:{service['port']}/info")[2])
    assert again["pid"] != info["pid"] and again["greeting"] == "Howdy"

    # nothing deployed on a unit: start says so
    cloud.unit("bare")
    bare = cloud.run_plan("bare", "Linux/StartServer", {
        "server": "app", "port": service["port"], "startCommand": "python3 app.py"})
    assert bare.last.returncode == 1 and "no application was deployed" in bare.last.stderr


def test_stop_also_stops_what_is_left_of_the_app(cloud):
    """/bin/sh -c stays the parent of a compound start command: when it dies the app
    runs on, the check says so and stop stops it."""
    service = app_service(cloud, "python3 app.py & wait")
    model = environment(service)
    sh = pid_of(cloud, "app-u0", "app.pid")
    os.kill(sh, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{sh}").exists(), f"the killed shell {sh} to be gone")

    check = operate(cloud, model, "app", "app-u0", "check")
    assert check.ok and check.verdict()["status"] == "degraded"
    assert "other processes of its group remain" in check.verdict()["detail"]

    stop = operate(cloud, model, "app", "app-u0", "stop")
    assert stop.ok and stop.lines() == [f"what was left of the application (its process {sh} "
                                        "exited) stopped"]
    assert operate(cloud, model, "app", "app-u0", "check").verdict()["status"] == "error"


def test_run_returns_the_output_of_the_command(cloud):
    service = web_service(cloud)
    model = environment(service)
    done = operate(cloud, model, "web", "web-u0", "run",
                   command="echo hello from $(basename $FORNACE_WORK_DIR); echo to-stderr >&2")
    assert done.ok and done.lines() == ["hello from web-u0", "to-stderr"]

    done = operate(cloud, model, "web", "web-u0", "run", command=["cat", "site/index.html"])
    assert done.ok and "<h1>Lifecycle site</h1>" in done.lines()

    failed = operate(cloud, model, "web", "web-u0", "run", command="echo partial; exit 3")
    assert failed.last.returncode == 1 and failed.lines() == ["partial"]
    assert "exited with code 3; output:\npartial" in failed.last.stderr

    slow = operate(cloud, model, "web", "web-u0", "run", command="sleep 30", timeout=1)
    assert slow.last.returncode == 1 and "did not finish within 1 s" in slow.last.stderr

    nothing = operate(cloud, model, "web", "web-u0", "run")       # no operation_kwargs
    assert nothing.last.returncode == 1 and "no command given" in nothing.last.stderr


def test_a_deregistered_unit_gets_no_more_requests_from_the_load_balancer(cloud):
    service = web_service(cloud, "linuxWebServerFarm", units=2)
    proxy_address = cloud.unit("web-proxy")
    lb_port = free_port(proxy_address)
    deployed = cloud.run_plan("web-proxy", "Linux/DeployProxy",
                              {"port": lb_port, "name": "farm", "address": proxy_address})
    assert deployed.ok, deployed.last.stderr
    for unit in service["units"]:
        done = cloud.run_plan("web-proxy", "Linux/RegisterBackend", {
            "name": unit["state"]["hostname"],
            "url": f"http://{unit['state']['address']}:{service['port']}"})
        assert done.ok, done.last.stderr
        unit["state"]["registered"] = True
    service["loadBalancerPort"] = lb_port
    service["state"] = {"address": proxy_address, "proxyPort": lb_port}
    model = environment(service)
    farm_url = f"http://{proxy_address}:{lb_port}/"
    backends = cloud.work("web-proxy") / "proxy" / "backends.json"

    def served_by(count: int = 6) -> set[str]:
        return {fetch(farm_url)[1]["X-Fornace-Backend"] for _ in range(count)}

    assert served_by() == {"web0", "web1"}
    balancer = operate(cloud, model, "web", "web-u0", "check_balancer")
    assert balancer.ok and balancer.verdict()["status"] == "ok"
    assert "2 of 2 backend(s) accept connections" in balancer.verdict()["detail"]

    # a stopped unit: the load balancer is degraded
    assert operate(cloud, model, "web", "web-u1", "stop").ok
    balancer = operate(cloud, model, "web", "web-u1", "check_balancer")
    assert balancer.ok and balancer.verdict()["status"] == "degraded"
    assert balancer.verdict()["detail"].endswith("1 of 2 backend(s) accept connections, "
                                                 "down: web1")
    assert operate(cloud, model, "web", "web-u1", "start").ok

    # unlink (scale in, heal, uninstall): web1 is deregistered on the proxy's agent
    done = unlink(cloud, model, "web", "web-u1")
    assert [d.ok for d in done] == [True]
    assert done[0].lines() == ["deregistered web1 from the load balancer: 1 backend(s) left"]
    assert [b["name"] for b in json.loads(backends.read_text())["backends"]] == ["web0"]
    assert fetch(site_url(service, 1))[0] == 200           # web1 still serves, but ...
    assert served_by(8) == {"web0"}                        # ... gets no request
    again = cloud.run_plan("web-proxy", "Linux/DeregisterBackend", {"name": "web1"})
    assert again.ok and again.lines() == ["web1 was not registered with the load balancer: "
                                          "1 backend(s)"]
    nowhere = cloud.run_plan("web-u0", "Linux/DeregisterBackend", {"name": "web1"})
    assert nowhere.ok and "no load balancer was deployed on this unit" in nowhere.lines()[0]

    # an unregistered unit is not unlinked
    service["units"][1]["state"]["registered"] = False
    assert unlink(cloud, model, "web", "web-u1") == []

    # the load balancer restarts with its backends; stopped, it is an error
    restart = operate(cloud, model, "web", "web-u0", "restart_balancer")
    assert restart.ok, restart.last.stderr
    assert served_by() == {"web0"}
    assert cloud.run_plan("web-proxy", "Linux/StopServer", {"server": "proxy"}).ok
    balancer = operate(cloud, model, "web", "web-u0", "check_balancer")
    assert balancer.last.returncode == 1 and balancer.verdict()["status"] == "error"
