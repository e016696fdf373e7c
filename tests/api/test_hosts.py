"""The API serves only the Host names it is reached by (DNS rebinding).

A page of ``attacker.test`` whose name the attacker points at this machine
sends requests with ``Host: attacker.test`` and a matching ``Origin``: same
origin for the browser, so only the Host check stops them -- on the JSON API
and on the dashboard alike.
"""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from apikit import make_api
from fornace.api import hosts
from fornace.api.hosts import HostsError, allowed_hosts, host_of
from fornace.cli.client.http import ApiClient
from serving import serving

ATTACKER = "attacker.test"


@pytest.fixture
def api(tmp_path):
    return make_api(f"sqlite:///{tmp_path / 'hosts.sqlite'}")


def as_host(client: TestClient, host: str, path: str, method: str = "GET", **kwargs):
    headers = {"Host": host, **kwargs.pop("headers", {})}
    return client.request(method, path, headers=headers, follow_redirects=False, **kwargs)


@pytest.mark.parametrize("method, path", [("GET", "/environments"), ("GET", "/v1/environments"),
                                          ("POST", "/environments"), ("GET", "/dashboard/"),
                                          ("GET", "/dashboard/login"),
                                          ("POST", "/dashboard/login")])
def test_a_rebound_name_is_refused_everywhere(api, method, path):
    kwargs = {"json": {"name": "x"}} if path == "/environments" and method == "POST" else \
        {"data": {"tenant": "t", "user": "u"}} if method == "POST" else {}
    answer = as_host(api.client, ATTACKER, path, method,
                     headers={"Origin": f"http://{ATTACKER}"}, **kwargs)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == 400 and ATTACKER in error["message"]
    assert "[api] allowed_hosts" in error["message"]
    assert api.client.get("/environments").json() == {"environments": []}


@pytest.mark.parametrize("host", ["localhost", "localhost:8082", "LOCALHOST.", "127.0.0.1",
                                  "127.0.0.1:8082", "[::1]", "[::1]:8082", "[0:0::1]:80"])
def test_the_loopback_names_are_served(api, host):
    assert as_host(api.client, host, "/environments").status_code == 200


@pytest.mark.parametrize("host", ["", "local host", "localhost:x", "localhost:99999999",
                                  "[::1", "::1", "[::1]x", "a..b", "user@localhost",
                                  "localhost/x", "-a.example"])
def test_a_malformed_host_is_a_400(api, host):
    answer = as_host(api.client, host, "/environments")
    assert answer.status_code == 400 and answer.json()["error"]["code"] == 400


def test_two_host_headers_are_a_400(api):
    answer = api.client.get("/environments",
                            headers=[("Host", "localhost"), ("Host", ATTACKER)])
    assert answer.status_code == 400


def test_the_test_client_s_host_is_the_tests_setting_not_the_api_s(monkeypatch):
    assert allowed_hosts().allows("testserver")       # the tests' conftest adds it
    monkeypatch.setattr(hosts, "LOOPBACK", ("localhost", "127.0.0.1", "::1"))
    assert not allowed_hosts().allows("testserver")


def test_patterns():
    allowed = allowed_hosts(["Fornace.Example.COM", ".corp.example", "*.lab.example",
                             "192.0.2.10", "[2001:DB8::1]", "2001:db8::2"], "10.0.0.5")
    for host in ("fornace.example.com", "corp.example", "a.b.corp.example", "x.lab.example",
                 "192.0.2.10", "2001:db8::1", "2001:db8::2", "10.0.0.5", "localhost", "::1"):
        assert allowed.allows(host_of(host if ":" not in host else f"[{host}]")), host
    for host in ("example.com", "evil-corp.example", "lab.example", "corp.example.evil",
                 "192.0.2.11", "10.0.0.6", ATTACKER):
        assert not allowed.allows(host_of(host)), host
    assert allowed_hosts(["*"]).allows(ATTACKER)


@pytest.mark.parametrize("bind", ["0.0.0.0", "::", ""])
def test_listening_on_every_address_accepts_only_the_listed_names(bind):
    allowed = allowed_hosts([], bind)
    assert allowed.allows("localhost") and not allowed.allows("0.0.0.0")
    assert not allowed.allows(ATTACKER)
    assert allowed_hosts(["fornace.example.com"], bind).allows("fornace.example.com")


@pytest.mark.parametrize("entry", ["http://fornace.example.com", "fornace.example.com:8082",
                                   "*.", ".", "a b", "*example.com", ".192.0.2.1", ""])
def test_a_malformed_entry_is_refused_naming_it(entry):
    with pytest.raises(HostsError, match="allowed_hosts"):
        allowed_hosts([entry])


def test_the_api_service_serves_its_host_and_the_configured_names(tmp_path):
    from fornace.api.server import ApiService
    from fornace.cli.main import build_conf

    conf = build_conf()
    conf(["api"], default_config_files=[])
    conf.set_override("state_dir", str(tmp_path), group="api")
    conf.set_override("host", "0.0.0.0", group="api")
    conf.set_override("allowed_hosts", ["fornace.example.com"], group="api")
    service = ApiService(conf, f"sqlite:///{tmp_path / 'hosts.sqlite'}")
    try:
        client = TestClient(service.app)
        assert as_host(client, "fornace.example.com:8082", "/environments").status_code == 200
        assert as_host(client, "localhost", "/dashboard/login").status_code == 200
        assert as_host(client, ATTACKER, "/environments").status_code == 400
    finally:
        service.stop()


def test_the_cli_s_client_works_over_http(api):
    with serving(api.client.app) as url:
        assert ApiClient(url).get("/environments") == {"environments": []}
        localhost = url.replace("127.0.0.1", "localhost")
        assert ApiClient(localhost).get("/environments") == {"environments": []}
