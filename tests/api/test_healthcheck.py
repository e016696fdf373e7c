"""``/healthcheck``: oslo.middleware's health check in the API -- its answers,
the ``disable_by_file`` backend taking the API out of a load balancer and
back, no authentication, any Host (unless detailed), ``allowed_source_ranges``."""
from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient

from apikit import ChosenCallers, make_api
from fornace.api.app import create_app
from fornace.api.hosts import allowed_hosts
from fornace.cli.main import build_conf
from serving import serving


@pytest.fixture
def api(tmp_path):
    return make_api(f"sqlite:///{tmp_path / 'health.sqlite'}")


def configured(tmp_path, text: str):
    """The options of ``fornace api`` with a configuration file holding ``text``."""
    path = tmp_path / "fornace.conf"
    path.write_text(text)
    conf = build_conf("api")
    conf(["--config-file", str(path), "api"], project="fornace", default_config_files=[])
    return conf


def health_app(api, conf, **kwargs):
    return create_app(api.store, ChosenCallers({}), healthcheck_conf=conf, **kwargs)


def test_by_default_the_check_answers_200_without_reasons(api):
    plain = api.client.get("/healthcheck")
    assert (plain.status_code, plain.text) == (200, "")
    assert plain.headers["content-type"].startswith("text/plain")
    assert api.client.get("/healthcheck", headers={"Accept": "application/json"}).json() == {
        "detailed": False, "reasons": []}
    head = api.client.head("/healthcheck")
    assert (head.status_code, head.content) == (204, b"")
    refused = api.client.post("/healthcheck")
    assert refused.status_code == 405 and refused.json()["error"]["code"] == 405


def test_the_disable_file_turns_the_check_to_503_and_back(api, tmp_path):
    flag = tmp_path / "healthcheck_disable"
    conf = configured(tmp_path, f"[healthcheck]\nbackends = disable_by_file\n"
                                f"disable_by_file_path = {flag}\n")
    client = TestClient(health_app(api, conf))
    ok = client.get("/healthcheck")
    assert (ok.status_code, ok.text) == (200, "OK")
    flag.write_text("")
    down = client.get("/healthcheck")
    assert (down.status_code, down.text) == (503, "DISABLED BY FILE")
    assert client.head("/healthcheck").status_code == 503
    assert client.get("/healthcheck", headers={"Accept": "application/json"}).json() == {
        "detailed": False, "reasons": ["DISABLED BY FILE"]}
    flag.unlink()
    again = client.get("/healthcheck")
    assert (again.status_code, again.text) == (200, "OK")
    assert client.head("/healthcheck").status_code == 204


def test_the_check_needs_no_token_and_answers_any_host(api, tmp_path):
    conf = configured(tmp_path, "")
    client = TestClient(health_app(api, conf, allowed_hosts=allowed_hosts(["api.example.com"])))
    assert client.get("/environments").status_code == 401     # every caller is refused
    assert client.get("/healthcheck").status_code == 200
    # a load balancer asks by the API's address, which no client uses
    by_address = {"Host": "192.0.2.10:8082"}
    assert client.get("/healthcheck", headers=by_address).status_code == 200
    assert client.get("/v1/", headers=by_address).status_code == 400


def test_details_only_when_configured_and_then_only_for_the_api_s_names(api, tmp_path):
    conf = configured(tmp_path, "[healthcheck]\ndetailed = true\n")
    client = TestClient(health_app(api, conf))
    details = client.get("/healthcheck", headers={"Accept": "application/json"}).json()
    assert details["detailed"] is True and details["threads"] and "python_version" in details
    # details tell about the server: a page of another site may not read them
    assert client.get("/healthcheck", headers={"Host": "rebound.example.net"}).status_code == 400


def test_a_source_outside_the_allowed_ranges_gets_the_api_s_404(api, tmp_path):
    outside = configured(tmp_path, "[healthcheck]\nallowed_source_ranges = 192.0.2.0/24\n")
    with serving(health_app(api, outside)) as url:
        ignored = httpx.get(url + "/healthcheck")
        assert ignored.status_code == 404 and ignored.json()["error"]["code"] == 404
    inside = configured(tmp_path, "[healthcheck]\nallowed_source_ranges = 127.0.0.0/8\n")
    with serving(health_app(api, inside)) as url:
        assert httpx.get(url + "/healthcheck").status_code == 200
