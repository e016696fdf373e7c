"""Caps on units: ``[api] max_units_per_service`` and ``max_units_per_environment``,
for the services of a session and for scale jobs."""
from __future__ import annotations

import copy

import pytest
from fastapi.testclient import TestClient

from apikit import make_api, web_server
from fornace.api.limits import UnitLimits
from fornace.api.server import ApiService
from fornace.cli.main import build_conf
from fornace.common import contract


@pytest.fixture
def api(tmp_path):
    return make_api(f"sqlite:///{tmp_path / 'limits.sqlite'}")


@pytest.fixture
def small(api):
    """The same API with caps of 3 units per service and 5 per environment."""
    api.store.limits = UnitLimits(per_service=3, per_environment=5)
    return api


def open_env(client, name="caps"):
    env_id = client.post("/environments", json={"name": name}).json()["id"]
    session_id = client.post(f"/environments/{env_id}/configure").json()["id"]
    return env_id, {"X-Configuration-Session": session_id}


def site(name, units):
    return web_server(name, units=[{} for _ in range(units)])


def add(client, env_id, headers, service):
    return client.post(f"/environments/{env_id}/services", json=service, headers=headers)


def refusal(response):
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()["error"]["message"]


def unit_count(client, env_id, headers):
    services = client.get(f"/environments/{env_id}/services", headers=headers).json()
    return {s["name"]: len(s["units"]) for s in services}


def test_the_defaults_refuse_3000_units(api):
    env_id, headers = open_env(api.client)
    message = refusal(add(api.client, env_id, headers, site("huge", 3000)))
    assert message == ("service huge would have 3000 units: at most 100 are allowed per "
                       "service ([api] max_units_per_service)")
    assert add(api.client, env_id, headers, site("big", 100)).status_code == 200
    for name in ("b2", "b3", "b4", "b5"):
        assert add(api.client, env_id, headers, site(name, 100)).status_code == 200
    message = refusal(add(api.client, env_id, headers, site("one-more", 1)))
    assert (f"environment {env_id} would have 501 units with service one-more at 1: at most "
            f"500 are allowed per environment ([api] max_units_per_environment)") in message
    assert sum(unit_count(api.client, env_id, headers).values()) == 500


def test_every_way_of_adding_units_is_capped(small):
    client = small.client
    env_id, headers = open_env(client)
    assert "service wide would have 4 units" in refusal(add(client, env_id, headers,
                                                            site("wide", 4)))
    web = add(client, env_id, headers, site("web", 3)).json()
    base = f"/environments/{env_id}/services"
    # one more unit through the sub-path of the units list
    message = refusal(client.post(f"{base}/{web['id']}/units", json={}, headers=headers))
    assert f"service web ({web['id']}) would have 4 units" in message
    # the units list replaced
    message = refusal(client.put(f"{base}/{web['id']}/units", json=[{}] * 5, headers=headers))
    assert "would have 5 units" in message
    # the whole list of services replaced
    services = client.get(base, headers=headers).json()
    grown = copy.deepcopy(services)
    grown[0]["units"] += [{}]
    assert "would have 4 units" in refusal(client.put(base, json=grown, headers=headers))
    # the environment's cap: 3 + 3 > 5
    message = refusal(add(client, env_id, headers, site("db", 3)))
    assert "would have 6 units with service db at 3" in message
    assert "[api] max_units_per_environment" in message
    assert unit_count(client, env_id, headers) == {"web": 3}


def test_an_environment_above_a_lowered_cap_can_still_be_edited_and_shrunk(api):
    env_id, headers = open_env(api.client)
    web = add(api.client, env_id, headers, site("web", 4)).json()
    api.store.limits = UnitLimits(per_service=2, per_environment=3)
    base = f"/environments/{env_id}/services/{web['id']}"
    assert api.client.put(f"{base}/uri", json="http://x", headers=headers).status_code == 200
    assert api.client.delete(f"{base}/units/3", headers=headers).status_code == 200
    assert unit_count(api.client, env_id, headers) == {"web": 3}
    assert "would have 4 units" in refusal(
        api.client.post(f"{base}/units", json={}, headers=headers))


def deployed(api, *services):
    env_id, headers = open_env(api.client)
    for service in services:
        assert add(api.client, env_id, headers, service).status_code == 200
    session_id = headers["X-Configuration-Session"]
    assert api.client.post(f"/environments/{env_id}/sessions/{session_id}/deploy"
                           ).status_code == 200
    body, message_id = api.published.tasks[-1]
    api.store.results.apply(contract.result_body(body), message_id)
    return env_id, {s["name"]: s["id"] for s in body["services"]}


def scale(api, env_id, service_id, delta):
    return api.client.post(f"/environments/{env_id}/actions/scale",
                           json={"node_id": service_id, "delta": delta})


def test_scale_jobs_are_capped(small):
    env_id, ids = deployed(small, site("web", 2), site("db", 2))
    published = len(small.published.tasks)
    message = refusal(scale(small, env_id, ids["web"], 2))
    assert message == (f"action scale: parameter 'delta' would give service web ({ids['web']}) "
                       f"4 units (2 + 2): at most 3 are allowed per service "
                       f"([api] max_units_per_service)")
    small.store.limits = UnitLimits(per_service=3, per_environment=4)
    message = refusal(scale(small, env_id, ids["db"], 1))
    assert (f"environment {env_id} 5 units, service db ({ids['db']}) 3" in message
            and "[api] max_units_per_environment" in message)
    assert len(small.published.tasks) == published        # nothing was started
    assert small.client.get(f"/environments/{env_id}").json()["status"] == "ready"
    assert scale(small, env_id, ids["web"], -1).status_code == 202     # scaling in is fine


def test_scale_within_the_caps_runs(small):
    env_id, ids = deployed(small, site("web", 2))
    response = scale(small, env_id, ids["web"], 1)
    assert response.status_code == 202, response.text
    assert response.json()["parameters"]["delta"] == 1


def test_the_options_reach_the_api_service(tmp_path):
    conf = build_conf()
    conf(["api"], default_config_files=[])
    assert (conf.api.max_units_per_service, conf.api.max_units_per_environment) == (100, 500)
    conf.set_override("url", "memory://", group="broker")
    conf.set_override("max_units_per_service", 2, group="api")
    conf.set_override("allowed_origins", ["https://ui.example.com"], group="api")
    service = ApiService(conf, f"sqlite:///{tmp_path / 'conf.sqlite'}")
    try:
        client = TestClient(service.app)
        env_id, headers = open_env(client)
        assert "[api] max_units_per_service" in refusal(add(client, env_id, headers,
                                                            site("web", 3)))
        allowed = client.post("/environments", json={"name": "ui"},
                              headers={"Origin": "https://ui.example.com"})
        assert allowed.status_code == 200, allowed.text
        other = client.post("/environments", json={"name": "x"},
                            headers={"Origin": "https://other.example.com"})
        assert other.status_code == 403
    finally:
        service.stop()
