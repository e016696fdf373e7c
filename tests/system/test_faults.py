"""Faults during real deployments: killed conductors and agents, a broker restart,
malformed messages, and what an environment deletion leaves behind.

Everything is real except the web server of the API: RabbitMQ (each test in a
virtual host of its own, made with ``rabbitmqctl`` and deleted afterwards, so
nothing else on the broker -- a benchmark, stale tasks of other tests -- sees
or disturbs these deployments; the broker restart on a private node of the
module's own, ``tools/rabbitcluster.py``, never the machine's), conductors as ``fornace conductor --stacks
local`` subprocesses (killed with SIGKILL where a test says so), local cloud
instances running real ``fornace agent`` processes, and the API's
``ApiService`` (SQLite in a temporary folder) with its result and report
consumers, driven through FastAPI's test client.

The catalog is a copy of ``data/`` whose ``deploy_static_site.py`` first
appends a line to ``runs.log`` in the unit's work dir (how many times the
script ran), creates ``started-<instance>`` in the test's gate folder, then
waits until the file ``open`` exists there: a test decides when the agent
step may end, so faults happen at a known point without timed sleeps.
"""
from __future__ import annotations

import collections
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import kombu
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from fornace.api.server import ApiService
from fornace.common.db.models import Status
from apikit import free_port
from fornace.cli.main import build_conf
from fornace.common import contract
from fornace.common.broker import Broker
from fornace.conductor.executors.localcloud import LocalStacks
from fornace.conductor.executors.processes import TOKEN_VARIABLE
from services import Rabbit, private_cluster, private_vhost
from waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data"
WAIT = 90.0          # generous limit of every wait: only there to avoid a hang

# Inserted into the catalog copy's deploy_static_site.py (GATES is filled in).
HOOK = '''

def _fault_hook():
    """Test hook: count the run, say the step started, wait for the gate."""
    import os
    import time
    from pathlib import Path

    work = Path(os.environ.get("FORNACE_WORK_DIR") or os.getcwd())
    with open(work / "runs.log", "a") as handle:
        handle.write(f"{os.getpid()}\\n")
    gates = Path(GATES)
    (gates / ("started-" + os.environ.get("FORNACE_INSTANCE", "unknown"))).touch()
    deadline = time.monotonic() + 300
    while not (gates / "open").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


'''


# ----------------------------------------------------------------------- RabbitMQ

def broker_accepts(url: str) -> bool:
    conn = kombu.Connection(url, connect_timeout=2)
    try:
        conn.connect()
        conn.channel()
        return True
    except Exception:  # noqa: BLE001 -- down or starting
        return False
    finally:
        try:
            conn.release()
        except Exception:  # noqa: BLE001
            pass


@pytest.fixture
def rabbit():
    """A virtual host of its own on the real RabbitMQ, deleted afterwards."""
    with private_vhost("fornace-faults") as rabbit:
        yield rabbit


@pytest.fixture(scope="module")
def private_node():
    """A RabbitMQ node of this module's own (``rabbitcluster.Cluster`` of one node)
    for the tests that stop the broker: the machine's node is never stopped."""
    with private_cluster(1) as cluster:
        yield cluster


def node_rabbit(node) -> Rabbit:
    """The default virtual host of a private node (``rabbitcluster.Node``)."""
    return Rabbit(node.url(), "127.0.0.1", node.port, "guest", "guest", "/")


# ----------------------------------------------------------------------- processes

def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _state(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2]


def token_processes(token: str) -> list[int]:
    """Live processes carrying an instance's FORNACE_INSTANCE_TOKEN."""
    marker = f"{TOKEN_VARIABLE}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() \
                and marker in _environ(int(entry)).split(b"\0") \
                and _state(int(entry)) not in (None, "Z", "X"):
            found.append(int(entry))
    return found


def kill_instance(token: str) -> list[int]:
    """SIGKILL every process of an instance (a VM pulled from the wall)."""
    killed = []

    def all_gone() -> bool:     # a process may start another before it dies: again
        pids = token_processes(token)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        return not pids
    wait_for(all_gone, f"the processes of instance {token} to die of SIGKILL",
             explain=lambda: f"left: {token_processes(token)}")
    return killed


# ----------------------------------------------------------------------- the world

@dataclass
class World:
    root: Path
    rabbit: Rabbit
    api: ApiService
    client: TestClient
    catalog: Path
    gates: Path
    cloud_dir: Path
    conductors: list[subprocess.Popen] = field(default_factory=list)
    logs: dict[int, Path] = field(default_factory=dict)
    database: str = ""   # the API's URL: the conductors' job locks are the API's
    queue_type: str = "classic"          # [broker] queue_type
    # agents get the nodes of [broker] url (all of a cluster's); else [rabbitmq]'s one
    agents_get_every_node: bool = False

    # -- configuration and conductors ------------------------------------------
    def config(self, agent_timeout: float) -> Path:
        r = self.rabbit
        path = self.root / f"fornace-{agent_timeout:g}.conf"
        path.write_text(
            f"[DEFAULT]\ndata_dir = {self.catalog}\n"
            f"[api]\nstate_dir = {self.root / 'state'}\n"
            f"[database]\nconnection = {self.database}\n"
            f"[broker]\nurl = {r.url}\nqueue_type = {self.queue_type}\n"
            f"[conductor]\ncloud_dir = {self.cloud_dir}\nmax_environments = 2\n"
            f"[engine]\nagent_timeout = {agent_timeout:g}\n"
            + ("" if self.agents_get_every_node else
               f"[rabbitmq]\nhost = {r.host}\nport = {r.port}\nlogin = {r.login}\n"
               f"password = {r.password}\nvirtual_host = {r.vhost}\n"))
        return path

    def start_conductor(self, agent_timeout: float = 120.0) -> subprocess.Popen:
        number = len(self.conductors) + 1
        log = self.root / f"conductor-{number}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "fornace.cli", "--config-file",
                 str(self.config(agent_timeout)), "conductor", "--stacks", "local"],
                cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        self.conductors.append(process)
        self.logs[process.pid] = log
        wait_for(lambda: "consumer(s) on" in self.log(process) or process.poll() is not None,
                 "the conductor to start", explain=self.explain)
        assert process.poll() is None, f"the conductor exited:\n{self.log(process)}"
        return process

    def log(self, process: subprocess.Popen) -> str:
        try:
            return self.logs[process.pid].read_text(errors="replace")
        except OSError:
            return ""

    def explain(self) -> str:
        parts = []
        for process in self.conductors:
            parts.append(f"--- conductor {process.pid} (exit {process.poll()}), last lines:\n"
                         + "\n".join(self.log(process).splitlines()[-40:]))
        return "\n".join(parts)

    def kill(self, process: subprocess.Popen) -> None:
        process.kill()
        process.wait(timeout=30)

    # -- the API ----------------------------------------------------------------
    def deploy(self, name: str, units: int, port: int) -> tuple[str, str]:
        """Create an environment with a linuxWebServer service and deploy it."""
        env = self.client.post("/environments", json={"name": name}).json()
        env_id = env["id"]
        session = self.client.post(f"/environments/{env_id}/configure").json()["id"]
        response = self.client.post(
            f"/environments/{env_id}/services", headers={"X-Configuration-Session": session},
            json={"name": name, "type": "linuxWebServer", "unitNamingPattern": "web#",
                  "osImage": {"name": "local", "type": "linux"}, "port": port,
                  "units": [{} for _ in range(units)]})
        assert response.status_code == 200, response.text
        response = self.client.post(f"/environments/{env_id}/sessions/{session}/deploy")
        assert response.status_code == 200, response.text
        deployments = self.client.get(f"/environments/{env_id}/deployments").json()
        return env_id, deployments["deployments"][0]["id"]

    def status(self, env_id: str) -> str | None:
        response = self.client.get(f"/environments/{env_id}")
        if response.status_code == 404:
            return None
        assert response.status_code == 200, response.text
        return response.json()["status"]

    def wait_end(self, env_id: str, timeout: float = WAIT) -> dict:
        """The environment once it is neither deploying nor deleting."""
        wait_for(lambda: self.status(env_id) not in ("deploying", "deleting", "pending"),
                 f"the deployment of {env_id} to end", timeout=timeout,
                 explain=lambda: f"status {self.status(env_id)!r}; reports "
                         f"{self.texts(env_id)}\n{self.explain()}")
        return self.client.get(f"/environments/{env_id}").json()

    def texts(self, env_id: str) -> list[str]:
        deployments = self.client.get(f"/environments/{env_id}/deployments")
        if deployments.status_code != 200:
            return []
        out = []
        for deployment in deployments.json()["deployments"]:
            reports = self.client.get(
                f"/environments/{env_id}/deployments/{deployment['id']}").json()["reports"]
            out.extend(f"{r['level']}: {r['text']}" for r in reports)
        return out

    def stored_reports(self, deployment_id: str) -> list[tuple[str | None, str, str]]:
        """(message id, level, text) of every report stored for a deployment."""
        with self.api.engine.connect() as db:
            return [tuple(row) for row in db.execute(
                select(Status.message_id, Status.level, Status.text).where(
                    Status.deployment_id == deployment_id))]

    def wait_reports(self, deployment_id: str, count: int) -> list[tuple[str | None, str, str]]:
        """The stored reports once there are at least ``count`` (reports and the result
        travel on two queues, so the result may be stored before the last reports)."""
        return wait_for(lambda: (lambda found: found if len(found) >= count else None)(
                            self.stored_reports(deployment_id)),
                        f"{count} reports of deployment {deployment_id}",
                        explain=lambda: f"{self.stored_reports(deployment_id)}\n"
                                        f"{self.explain()}")

    # -- the local cloud ---------------------------------------------------------
    def instances(self, env_id: str) -> dict[str, dict]:
        return LocalStacks(self.cloud_dir).instances(f"e{env_id}")

    def started(self, instance: str) -> bool:
        return (self.gates / f"started-{instance}").exists()

    def open_gate(self) -> None:
        (self.gates / "open").touch()

    def runs(self, env_id: str, instance: str) -> int:
        path = self.cloud_dir / f"e{env_id}" / instance / "work" / "runs.log"
        return len(path.read_text().splitlines()) if path.exists() else 0


def make_catalog(target: Path, gates: Path) -> Path:
    shutil.copytree(DATA, target)
    script = target / "templates" / "agent" / "scripts" / "deploy_static_site.py"
    text = script.read_text()
    marker = 'if __name__ == "__main__":'
    assert marker in text and "def main() -> int:\n" in text
    text = text.replace(marker, HOOK.replace("GATES", repr(str(gates))) + marker)
    text = text.replace("def main() -> int:\n", "def main() -> int:\n    _fault_hook()\n", 1)
    script.write_text(text)
    return target


@pytest.fixture
def world(rabbit):
    with open_world(rabbit) as made:
        yield made


@pytest.fixture
def node_world(private_node):
    """A world on the module's private node (its default virtual host)."""
    with open_world(node_rabbit(private_node.nodes[0])) as made:
        yield made


@contextlib.contextmanager
def open_world(rabbit: Rabbit, db_url: str = "", **options) -> Iterator[World]:
    """The API (consuming; on ``db_url``, else SQLite in a temporary folder), a
    catalog with gates and a local cloud on ``rabbit``; ``options`` are
    :class:`World`'s (queue_type...).  Conductors are started by the tests;
    everything is stopped and removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="fornace-faults-"))
    gates = root / "gates"
    gates.mkdir()
    catalog = make_catalog(root / "catalog", gates)
    cloud_dir = root / "cloud"
    api = None
    made: World | None = None
    try:
        conf = build_conf()
        conf(["api"], default_config_files=[])
        conf.set_override("url", rabbit.url, group="broker")
        conf.set_override("queue_type", options.get("queue_type", "classic"), group="broker")
        database = db_url or f"sqlite:///{root / 'api.sqlite'}"
        api = ApiService(conf, database)
        assert api.start_consumers().ready.wait(30), "the API could not subscribe"
        made = World(root, rabbit, api, TestClient(api.app), catalog, gates, cloud_dir,
                     database=database, **options)
        yield made
    finally:
        tokens = []
        if made is not None:
            for process in made.conductors:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in made.conductors:
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=30)
        if cloud_dir.exists():
            stacks = LocalStacks(cloud_dir, stop_timeout=5)
            for name in stacks.stack_names():
                tokens.extend(i.get("token") for i in stacks.instances(name).values())
                try:
                    stacks.delete(name)
                except Exception:  # noqa: BLE001 -- still kill what is left below
                    logging.getLogger(__name__).exception("deleting stack %s", name)
        for token in tokens:
            if token:
                kill_instance(token)
        if api is not None:
            api.stop()
        shutil.rmtree(root, ignore_errors=True)


# ----------------------------------------------------------------------- the tests

def expected_texts(service: str, units: dict[str, str], answers: dict[str, str]) -> list[str]:
    """The reports of a successful linuxWebServer deployment (hostname -> unit name)."""
    texts = [f"Service {service} is ready"]
    for hostname, name in units.items():
        texts += [f"Creating instance {hostname} ({name})",
                  f"Instance {hostname} ({name}) created",
                  f"Deploying the web site on {hostname}",
                  f"Web site deployed on {hostname}: {answers[hostname]}"]
    return texts


def unit_names(environment: dict) -> dict[str, str]:
    return {u["state"]["hostname"]: u["name"]
            for s in environment["services"] for u in s["units"]}


def site_reports(world: World, environment: dict, deployment_id: str,
                 port: int) -> list[tuple[str | None, str, str]]:
    """The stored reports of a one-unit site deployment that ended ready, once
    there are as many as it sends; each text checked to be there once."""
    address = environment["services"][0]["units"][0]["state"]["address"]
    expected = expected_texts("site", unit_names(environment),
                              {"web1": f"serving http://{address}:{port}/"})
    stored = world.wait_reports(deployment_id, len(expected))
    assert collections.Counter(text for _, _, text in stored) == \
        collections.Counter(expected), world.explain()
    return stored


def assert_deployed_once(world: World, environment: dict, deployment_id: str,
                         port: int) -> dict[str, str]:
    """A ready 2-unit ``site`` deployment with nothing lost and nothing doubled:
    each unit's script ran once, every report is stored once (ids 1..N, all
    info) and the deployment succeeded. The units' addresses by hostname."""
    env_id = environment["id"]
    for instance in ("web1", "web2"):
        assert world.runs(env_id, instance) == 1, f"{instance} ran its script again"
    units = unit_names(environment)
    assert sorted(units) == ["web1", "web2"]
    addresses = {u["state"]["hostname"]: u["state"]["address"]
                 for u in environment["services"][0]["units"]}
    expected = expected_texts("site", units, {h: f"serving http://{a}:{port}/"
                                              for h, a in addresses.items()})
    stored = world.wait_reports(deployment_id, len(expected))
    assert collections.Counter(text for _, _, text in stored) == \
        collections.Counter(expected), world.explain()
    assert all(level == "info" for _, level, _ in stored)
    assert sorted(m for m, _, _ in stored) == sorted(
        f"{deployment_id}-report-{n}" for n in range(1, len(expected) + 1))
    deployment = world.client.get(f"/environments/{env_id}/deployments").json()["deployments"]
    assert [d["state"] for d in deployment] == ["success"]
    return addresses


def test_a_conductor_killed_mid_deployment_is_replaced_without_losing_or_repeating(world):
    """SIGKILL conductor A while both units run their plan; conductor B gets the task
    again from the broker and finishes it: every report stored once, each unit's
    script run once (B sends the same plan ids; the agents answer from their journal)."""
    port = free_port()
    first = world.start_conductor()
    env_id, deployment_id = world.deploy("site", units=2, port=port)
    wait_for(lambda: world.started("web1") and world.started("web2"),
             "both units to run their deployment script", explain=world.explain)
    assert world.status(env_id) == "deploying"
    wait_for(lambda: {"Deploying the web site on web1", "Deploying the web site on web2"}
             <= {text for _, _, text in world.stored_reports(deployment_id)},
             "the reports of conductor A to be stored", explain=world.explain)
    agents = {name: info["pid"] for name, info in world.instances(env_id).items()}
    world.kill(first)

    second = world.start_conductor()
    wait_for(lambda: f"job {deployment_id} (deploy) started" in world.log(second),
             "conductor B to take the task again", explain=world.explain)
    world.open_gate()
    environment = world.wait_end(env_id)
    assert environment["status"] == "ready", world.texts(env_id)

    # the same agents served both conductors (the instances were not restarted)
    assert {n: i["pid"] for n, i in world.instances(env_id).items()} == agents
    assert_deployed_once(world, environment, deployment_id, port)
    assert second.poll() is None


def test_a_killed_agent_times_out_its_unit_and_the_deployment_fails(world):
    """Kill web1's whole instance (agent and plan script) while its plan runs: after
    [engine] agent_timeout the unit gets a timeout error report naming it and the
    environment ends in ``deploy failure`` (nothing hangs)."""
    conductor = world.start_conductor(agent_timeout=6)
    env_id, deployment_id = world.deploy("site", units=1, port=free_port())
    wait_for(lambda: world.started("web1"), "web1 to run its deployment script",
             explain=world.explain)
    token = world.instances(env_id)["web1"]["token"]
    assert kill_instance(token), "web1 had no process to kill"
    assert not token_processes(token)
    world.open_gate()       # nobody is left to go through it
    # creating, created, deploying, and the failure (the result may come before it)
    stored = world.wait_reports(deployment_id, 4)
    environment = world.wait_end(env_id)

    assert environment["status"] == "deploy failure"
    errors = [text for _, level, text in stored if level == "error"]
    assert errors == ["Web site deployment on web1 failed: no answer from the agent "
                      "within 6 seconds"], stored
    texts = [text for _, _, text in stored]
    assert not any(t.startswith("Web site deployed on") for t in texts)
    assert "Service site is ready" not in texts
    assert len(stored) == 4, stored
    assert world.runs(env_id, "web1") == 1
    deployments = world.client.get(f"/environments/{env_id}/deployments").json()
    assert [d["state"] for d in deployments["deployments"]] == ["completed_w_errors"]
    unit = environment["services"][0]["units"][0]
    assert unit["state"].get("failed") is True and not unit["state"].get("siteDeployed")
    assert conductor.poll() is None


def test_a_broker_restart_during_the_agent_step_does_not_stop_the_deployment(node_world,
                                                                             private_node):
    """``rabbitmqctl stop_app`` / ``start_app`` of the broker (a private node) while the
    unit's plan runs: the conductor, the agent and the API's consumers reconnect and
    the environment becomes ready."""
    world, node = node_world, private_node.nodes[0]
    port = free_port()
    conductor = world.start_conductor(agent_timeout=120)
    env_id, deployment_id = world.deploy("site", units=1, port=port)
    wait_for(lambda: world.started("web1"), "web1 to run its deployment script",
             explain=world.explain)
    try:
        private_node.stop_app(node)
        assert not broker_accepts(world.rabbit.url)
    finally:
        private_node.start_app(node)
    wait_for(lambda: broker_accepts(world.rabbit.url), "RabbitMQ to accept connections")
    world.open_gate()
    environment = world.wait_end(env_id, timeout=150)

    assert environment["status"] == "ready", world.texts(env_id)
    site_reports(world, environment, deployment_id, port)
    address = environment["services"][0]["units"][0]["state"]["address"]
    assert world.runs(env_id, "web1") == 1
    assert conductor.poll() is None
    # the site the plan started answers
    with urllib.request.urlopen(f"http://{address}:{port}/", timeout=10) as page:
        assert "<h1>site</h1>" in page.read().decode()


def publish_raw(url: str, queue: str, body: bytes, message_id: str) -> None:
    """A message that is not JSON (Broker.publish only sends JSON)."""
    with kombu.Connection(url) as conn:
        target = kombu.Queue(queue, kombu.Exchange(""), routing_key=queue, durable=True)
        if queue == contract.TASKS:
            exchange = kombu.Exchange(contract.TASKS, "direct", durable=True)
            target = kombu.Queue(queue, exchange, routing_key=queue, durable=True)
        conn.Producer().publish(body, exchange=target.exchange, routing_key=queue,
                                declare=[target], content_type="application/octet-stream",
                                content_encoding="binary", message_id=message_id,
                                delivery_mode=2)


def test_malformed_tasks_and_results_are_dropped_and_both_sides_keep_serving(world, caplog):
    """Bad messages on ``tasks``, ``task-results`` and ``task-reports`` are logged as
    dropped by the conductor, set aside by the API (acked, never retried); a
    deployment that follows completes."""
    caplog.set_level(logging.ERROR, logger="fornace.common.consumer")
    caplog.set_level(logging.WARNING, logger="fornace.api.stores.deadletters")
    url = world.rabbit.url
    conductor = world.start_conductor(agent_timeout=60)
    world.open_gate()
    tag = uuid.uuid4().hex[:8]
    bad_tasks = {f"not-json-{tag}": b"{this is not json",
                 f"not-utf8-{tag}": b"\xff\xfe\x00garbage"}
    for message_id, body in bad_tasks.items():
        publish_raw(url, contract.TASKS, body, message_id)
    not_tasks = {f"a-list-{tag}": [1, 2, 3],
                 f"no-tenant-{tag}": {"id": "e1", "services": []},
                 f"bad-services-{tag}": {"id": "e1", "tenant_id": "t1", "services": 7}}
    with Broker(url) as broker:
        for message_id, body in not_tasks.items():
            broker.publish(contract.TASKS, body, message_id)
        broker.publish(contract.RESULTS, {"services": []}, f"result-no-id-{tag}")
        broker.publish(contract.REPORTS, {"text": "no fields"}, f"report-bad-{tag}")
    publish_raw(url, contract.RESULTS, b"\x00 not json", f"result-not-json-{tag}")

    dropped_tasks = set(bad_tasks) | set(not_tasks)
    wait_for(lambda: all(f"dropping bad message {m} on 'tasks'" in world.log(conductor)
                         for m in dropped_tasks),
             "the conductor to drop the bad tasks", explain=world.explain)
    api_dropped = {f"result-no-id-{tag}": "task-results",
                   f"result-not-json-{tag}": "task-results",
                   f"report-bad-{tag}": "task-reports"}
    # the API sets them aside in its dead-letter table (logged as warnings)
    wait_for(lambda: all(any(f"message {m} on '{q}'" in r.getMessage()
                             and "set aside as dead letter" in r.getMessage()
                             for r in caplog.records) for m, q in api_dropped.items()),
             "the API to set aside the bad result and report")
    assert conductor.poll() is None
    assert world.client.get("/environments").status_code == 200

    env_id, deployment_id = world.deploy("after", units=1, port=free_port())
    environment = world.wait_end(env_id)
    assert environment["status"] == "ready", world.texts(env_id)
    stored = world.wait_reports(deployment_id, 5)
    assert "Service after is ready" in [t for _, _, t in stored]
    # dropped means acked: nothing is left to be retried
    with Broker(url) as broker:
        for queue in (contract.TASKS, contract.RESULTS, contract.REPORTS):
            assert broker.drain(queue, timeout=0.5) == [], queue
    log = world.log(conductor)
    for message_id in dropped_tasks:
        assert log.count(f"dropping bad message {message_id} on 'tasks'") == 1
    assert "Traceback" not in log


def test_deleting_an_environment_removes_its_stack_and_stops_its_agents(world):
    """After a deployment, DELETE /environments/{id}: the environment goes away, no
    process of its instances is left (agents and the web servers they started) and
    the sandboxes are removed."""
    port = free_port()
    world.start_conductor(agent_timeout=60)
    world.open_gate()
    env_id, _ = world.deploy("gone", units=2, port=port)
    environment = world.wait_end(env_id)
    assert environment["status"] == "ready", world.texts(env_id)
    instances = world.instances(env_id)
    assert sorted(instances) == ["web1", "web2"]
    tokens = {name: info["token"] for name, info in instances.items()}
    urls = [f"http://{u['state']['address']}:{port}/"
            for u in environment["services"][0]["units"]]
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as page:
            assert "<h1>gone</h1>" in page.read().decode()
    for name, token in tokens.items():
        # the agent and the web server its plan left running
        assert len(token_processes(token)) >= 2, name
    made = [name for name in world.rabbit.queues() if env_id in name]
    assert len(made) == 3, made     # two agents' queues and the results queue

    assert world.client.delete(f"/environments/{env_id}").status_code == 200
    wait_for(lambda: world.status(env_id) in (None, "delete failure"),
             "the environment to be deleted", explain=world.explain)
    assert world.status(env_id) is None, world.texts(env_id)
    # regression: the agents' queues stayed on the broker for ever
    assert [name for name in world.rabbit.queues() if env_id in name] == []
    for name, token in tokens.items():
        assert token_processes(token) == [], f"processes of {name} left"
    assert not (world.cloud_dir / f"e{env_id}").exists()
    assert LocalStacks(world.cloud_dir).stack_names() == []
    for url in urls:
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(url, timeout=5)


def test_abandoning_a_running_deployment_stops_it_and_removes_what_it_made(world):
    """Regression: `env delete --abandon` during a deployment left the units'
    processes running for ever and the job went on; now the job stops (its lock
    is revoked) and a clean-up deletion removes the stack and its processes."""
    port = free_port()
    conductor = world.start_conductor(agent_timeout=300)
    env_id, _ = world.deploy("abandon", units=2, port=port)
    wait_for(lambda: world.started("web1") and world.started("web2"),
             "both units to be in their agent step", explain=world.explain)
    tokens = [info["token"] for info in world.instances(env_id).values()]
    assert all(token_processes(token) for token in tokens)
    response = world.client.delete(f"/environments/{env_id}", params={"abandon": "true"})
    assert response.status_code == 200, response.text
    assert world.status(env_id) is None
    wait_for(lambda: all(token_processes(token) == [] for token in tokens),
             "the abandoned environment's processes to be stopped", explain=world.explain)
    wait_for(lambda: not (world.cloud_dir / f"e{env_id}").exists(),
             "its sandboxes to be removed", explain=world.explain)
    log = world.log(conductor)
    assert "lost the environment's lock" in log and "it sends no result" in log
    wait_for(lambda: not any(env_id in name for name in world.rabbit.queues()),
             "the abandoned environment's queues to be deleted", explain=world.explain)
