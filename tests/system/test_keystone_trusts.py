"""A deployment outlasts its user's token: the conductor acts through a Keystone
trust.  Real Keystone (a keystone-up of the test's own whose tokens live
seconds, Heat of heat-up in its catalog), real Heat, the API in keystone mode
and the conductor in one process (memory broker, stand-in agents)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import identitykit
from fornace.api.server import ApiService
from fornace.cli.main import build_conf
from fornace.conductor.config import engine_settings, trust_deleter
from fornace.conductor.daemon import Conductor, ConductorSettings
from fornace.conductor.executors import stacks_factory
from fornace.conductor.executors.heat import HeatStacks
from services import heat_url, import_or_require, keystone_url
from standins import StandInAgents
from waiting import wait_for

DATA = Path(__file__).resolve().parents[2] / "data"
TOKEN_SECONDS = 12

# Heat without Nova: the catalog's instances are placeholders
REGISTRY = {"OS::Nova::Server": "OS::Heat::None"}


@pytest.fixture
def cloud(tmp_path):
    """(API client, conductor's conf, keystone URL) on a Keystone of the test's own."""
    heat_url()
    keystone_url()
    import_or_require("heatclient.client")
    with identitykit.own_keystone(tmp_path, expiration=TOKEN_SECONDS) as url:
        conf = build_conf()
        conf(["api"], default_config_files=[])
        conf.set_override("auth_mode", "keystone", group="api")
        conf.set_override("state_dir", str(tmp_path / "state"), group="api")
        identitykit.set_keystone_options(conf, url)
        conf.set_override("resource_registry", json.dumps(REGISTRY), group="heat")
        conf.set_override("poll_start", 0.1, group="heat")
        conf.set_override("poll_max", 0.5, group="heat")
        conf.set_override("stack_timeout", 120.0, group="heat")
        api = ApiService(conf, f"sqlite:///{tmp_path / 'trusts.sqlite'}")
        assert api.start_consumers().ready.wait(10)
        yield api, TestClient(api.app), conf, url
        api.stop()


def start_conductor(conf) -> Conductor:
    daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA,
                                         max_environments=2, engine=engine_settings(conf),
                                         delete_trust=trust_deleter(conf)),
                       stacks_factory("heat", conf))
    daemon.start()
    assert daemon.wait_ready()
    return daemon


def new_environment(client, token: str, name: str) -> tuple[str, str, StandInAgents]:
    """An environment with one Linux web server unit, deployed by ``token``."""
    headers = {"X-Auth-Token": token}
    env = client.post("/environments", json={"name": name}, headers=headers).json()
    session = client.post(f"/environments/{env['id']}/configure", headers=headers).json()["id"]
    service = client.post(f"/environments/{env['id']}/services/", headers={
        **headers, "X-Configuration-Session": session}, json={
        "name": f"{name}-site", "type": "linuxWebServer", "unitNamingPattern": "web#",
        "osImage": {"name": "debian"}, "units": [{}]})
    assert service.status_code == 200, service.text
    service = service.json()
    agents = StandInAgents("memory://", env["id"], [u["id"] for u in service["units"]],
                           service=service["id"])
    deployed = client.post(f"/environments/{env['id']}/sessions/{session}/deploy",
                           headers=headers)
    assert deployed.status_code == 200, deployed.text
    return env["id"], service["id"], agents


def settled(client, token: str, env_id: str) -> dict:
    def done():
        response = client.get(f"/environments/{env_id}", headers={"X-Auth-Token": token})
        if response.status_code == 404:
            return {"status": "gone"}
        body = response.json()
        return body if body["status"] not in ("deploying", "deleting") else None
    return wait_for(done, f"environment {env_id} to settle", timeout=180)


def reports(client, token: str, env_id: str) -> list[str]:
    headers = {"X-Auth-Token": token}
    [job] = client.get(f"/environments/{env_id}/deployments",
                       headers=headers).json()["deployments"][:1]
    found = client.get(f"/environments/{env_id}/deployments/{job['id']}",
                       headers=headers).json()["reports"]
    return [f"{r['level']}: {r['text']}" for r in found]


def expired(url: str, token: str) -> bool:
    response = identitykit.identity(identitykit.admin(url), "GET", "/auth/tokens",
                                    headers={"X-Subject-Token": token})
    return response.status_code == 404


def test_a_deployment_outlives_the_users_token_through_a_trust(cloud):
    api, client, conf, url = cloud
    alice = identitykit.login("alice", url)
    with_trust, _, agents = new_environment(client, alice.token, "trusted")
    [trust] = identitykit.trusts_of(alice.user_id, url)
    assert trust["trustee_user_id"] == identitykit.login("fornace", url).user_id
    assert trust["project_id"] == alice.project_id and trust["impersonation"] is True
    # the same deployment without a trust: what Murano 0.2 did (the task's token)
    trusts, api.store.trusts = api.store.trusts, None
    token_only, _, token_agents = new_environment(client, alice.token, "token-only")
    api.store.trusts = trusts
    # the conductor takes the tasks only once alice's token has expired
    wait_for(lambda: expired(url, alice.token), "alice's token to expire",
             timeout=TOKEN_SECONDS + 60, interval=0.5)
    daemon = start_conductor(conf)
    try:
        again = identitykit.login("alice", url)
        done = settled(client, again.token, with_trust)
        assert done["status"] == "ready", reports(client, again.token, with_trust)
        failed = settled(client, again.token, token_only)
        assert failed["status"] == "deploy failure"
        why = wait_for(lambda: [r for r in reports(client, again.token, token_only)
                                if "the cloud is unreachable" in r], "the failure's report")
        assert "Failed to validate token" in why[0] and alice.token not in why[0]
        stacks = HeatStacks.from_config(conf, again.token, again.project_id)
        assert stacks.describe(f"e{with_trust}").endswith("CREATE_COMPLETE")
        assert stacks.describe(f"e{token_only}") == "gone"   # never reached Heat
        # deleted with alice's new token: the stack goes, and the trust with it
        assert client.delete(f"/environments/{with_trust}",
                             headers={"X-Auth-Token": again.token}).status_code == 200
        assert settled(client, again.token, with_trust)["status"] == "gone"
        assert stacks.describe(f"e{with_trust}") == "gone"
        assert not identitykit.trust_exists(trust["id"], url)
    finally:
        agents.stop.set()
        token_agents.stop.set()
        daemon.shutdown()
