"""API -> tasks -> conductor -> (simulated stacks, stand-in agents) -> results -> API."""
from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from waiting import wait_for
from fornace.api.server import ApiService
from fornace.cli.main import build_conf
from fornace.conductor.daemon import Conductor, ConductorSettings
from fornace.conductor.executors.simulator import SimulatedCloud
from fornace.conductor.session import Settings
from standins import StandInAgents

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(params=["memory", "rabbitmq"])
def stack(request, tmp_path):
    url = "memory://" if request.param == "memory" else request.getfixturevalue("amqp_vhost")
    conf = build_conf()
    conf(["api"], default_config_files=[])
    conf.set_override("url", url, group="broker")
    api = ApiService(conf, f"sqlite:///{tmp_path / 'flow.sqlite'}")
    assert api.start_consumers().ready.wait(10)
    daemon = Conductor(ConductorSettings(broker_url=url, data_dir=DATA, max_environments=1,
                                         engine=Settings(agent_timeout=5)),
                       lambda task: SimulatedCloud().executors()[0])
    daemon.start()
    assert daemon.wait_ready()
    yield url, TestClient(api.app)
    daemon.shutdown()
    api.stop()


def wait_status(client, env_id, wanted, timeout=30.0):
    """The environment once its status is ``wanted`` ("gone": deleted; then {})."""
    def reached():
        response = client.get(f"/environments/{env_id}")
        if response.status_code == 404:
            return {} if wanted == "gone" else None
        body = response.json()
        return body if body.get("status") == wanted else None
    found = wait_for(reached, timeout=timeout)
    assert found is not None, (f"environment {env_id} did not become {wanted}: "
                               f"{client.get(f'/environments/{env_id}').text}")
    return found


def test_deploy_then_delete_through_the_api(stack):
    url, client = stack
    env = client.post("/environments", json={"name": "flow"}).json()
    session = client.post(f"/environments/{env['id']}/configure").json()["id"]
    service = client.post(f"/environments/{env['id']}/services/", headers={
        "X-Configuration-Session": session}, json={
        "name": "site", "type": "linuxWebServer", "unitNamingPattern": "web#",
        "osImage": {"name": "debian"}, "units": [{}, {}]}).json()
    agents = StandInAgents(url, env["id"], [u["id"] for u in service["units"]],
                           service=service["id"])
    assert client.post(f"/environments/{env['id']}/sessions/{session}/deploy").status_code == 200
    ready = wait_status(client, env["id"], "ready")
    assert ready["version"] == 1
    states = [u["state"] for u in ready["services"][0]["units"]]
    assert states == [{"hostname": "web1", "address": None, "siteDeployed": True, "url": None},
                      {"hostname": "web2", "address": None, "siteDeployed": True, "url": None}]
    deployment = client.get(f"/environments/{env['id']}/deployments").json()["deployments"][0]
    assert deployment["state"] == "success"
    # reports and the result travel on two queues: the last report may be stored
    # just after the environment is ready
    def texts():
        reports = client.get(f"/environments/{env['id']}/deployments/{deployment['id']}").json()
        return [r["text"] for r in reports["reports"]]
    wait_for(lambda: "Service site is ready" in texts(), "the last report")
    assert client.delete(f"/environments/{env['id']}").status_code == 200
    wait_status(client, env["id"], "gone")
    agents.stop.set()
