"""The API driven by the real python-muranoclient 2.8 over HTTP."""
from __future__ import annotations

import pytest

from apikit import make_api, web_server
from fornace.common import contract
from serving import serving
from services import import_or_require

mc_client = import_or_require("muranoclient.v1.client")
mc_exc = import_or_require("muranoclient.common.exceptions")



@pytest.fixture
def served(tmp_path):
    api = make_api(f"sqlite:///{tmp_path / 'mc.sqlite'}")
    with serving(api.client.app) as url:
        yield api, mc_client.Client(url, token="tok-1")


def test_environments(served):
    api, client = served
    env = client.environments.create({"name": "mc-env"})
    assert env.name == "mc-env" and env.version == 0
    assert [e.id for e in client.environments.list()] == [env.id]
    shown = client.environments.get(env.id)
    assert shown.services == [] and shown.status == "ready"
    client.environments.update(env.id, "renamed")
    assert client.environments.get(env.id).name == "renamed"
    client.environments.delete(env.id)
    with pytest.raises(mc_exc.HTTPNotFound, match="environment [0-9a-f]+ not found"):
        client.environments.get(env.id)


def test_sessions_services_deploy_and_reports(served):
    api, client = served
    env = client.environments.create({"name": "mc-deploy"})
    session = client.sessions.configure(env.id)
    assert session.state == "open"
    assert client.sessions.get(env.id, session.id).state == "open"
    service = client.services.post(env.id, "/", web_server(), session.id)
    assert service.name == "frontend" and service.units[0]["name"] == "frontend_instance_0"
    assert [s.name for s in client.services.list(env.id, session.id)] == ["frontend"]
    got = client.services.get(env.id, f"/{service.id}", session.id)
    assert got.adminPassword == "***"
    assert client.environments.get(env.id, session.id).services[0]["id"] == service.id
    client.services.delete(env.id, f"/{service.id}", session.id)
    assert client.services.list(env.id, session.id) == []
    client.services.post(env.id, "/", web_server("again"), session.id)

    other = client.sessions.configure(env.id)
    client.sessions.delete(env.id, other.id)
    with pytest.raises(mc_exc.HTTPNotFound, match="session [0-9a-f]+ not found in environment"):
        client.sessions.get(env.id, other.id)

    client.sessions.deploy(env.id, session.id)
    assert client.sessions.get(env.id, session.id).state == "deploying"
    with pytest.raises(mc_exc.HTTPConflict,     # busy: its deployment runs
                       match="environment mc-deploy is busy: job [0-9a-f]+ \\(deploy\\)"):
        client.sessions.delete(env.id, session.id)
    with pytest.raises(mc_exc.HTTPConflict,
                       match="environment mc-deploy is busy: job [0-9a-f]+ \\(deploy\\)"):
        client.sessions.configure(env.id)

    body, message_id = api.published.tasks[-1]
    unit_id = body["services"][0]["units"][0]["id"]
    api.store.reports.add(contract.report_body(unit_id, "unit", "created", "info", env.id), "r1")
    api.store.results.apply(contract.result_body(body), message_id)

    deployments = client.deployments.list(env.id)
    assert [d.id for d in deployments] == [message_id]
    assert deployments[0].state == "success"
    assert [d.id for d in client.deployments.list(None, all_environments=True)] == [message_id]
    reports = client.deployments.reports(env.id, message_id)
    assert [r.text for r in reports] == ["created"]
    statuses = client.environments.last_status(env.id, session.id)
    assert statuses[unit_id].text == "created"


def test_errors_reach_the_client_as_exceptions(served):
    api, client = served
    with pytest.raises(mc_exc.HTTPNotFound, match="environment nope not found"):
        client.environments.get("nope")
    env = client.environments.create({"name": "e"})
    session = client.sessions.configure(env.id)
    with pytest.raises(mc_exc.HTTPBadRequest, match="unknown service type 'teapot'"):
        client.services.post(env.id, "/", {"name": "x", "type": "teapot", "units": [{}]},
                             session.id)


def test_a_unit_cap_reaches_the_client_as_a_bad_request(served):
    api, client = served
    env = client.environments.create({"name": "caps"})
    session = client.sessions.configure(env.id)
    with pytest.raises(mc_exc.HTTPBadRequest,
                       match=r"at most 100 are allowed per service \(\[api\] max_units") as raised:
        client.services.post(env.id, "/", web_server(units=[{}] * 101), session.id)
    assert "[api] max_units_per_service" in str(raised.value)
    assert client.services.list(env.id, session.id) == []


def test_region_headers_and_model_paths_as_the_client_sends_them(served):
    """2.8's own calls: create with ``region`` (null when not given), services
    PUT whole with ids in ``"?"`` headers, ``get_model`` with a path."""
    api, client = served
    assert client.environments.create({"name": "no-region", "region": None}).region is None
    env = client.environments.create({"name": "mc-region", "region": "RegionOne"})
    assert env.region == "RegionOne"
    session = client.sessions.configure(env.id)
    site = {"?": {"id": "c" * 32, "type": "linuxWebServer"}, "name": "site",
            "osImage": {"name": "debian-12"}, "units": [{}]}
    client.services.put(env.id, "/", [site], session.id)
    services = client.environments.get_model(env.id, "/services", session.id)
    assert [s["id"] for s in services] == ["c" * 32]
    assert services[0]["units"][0]["id"] and services[0]["?"]["id"] == "c" * 32
    assert client.environments.get_model(env.id, "/region", session.id) == "RegionOne"
    with pytest.raises(mc_exc.HTTPNotFound, match="not found in the model"):
        client.environments.get_model(env.id, "/services/nope", session.id)
