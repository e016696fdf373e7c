"""Version discovery: ``GET /`` and ``GET /v1/`` as OpenStack clients read them
(keystoneauth's discovery included), a browser sent from ``/`` to the
dashboard, and the API's own routes still at ``/`` and ``/v1``."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from keystoneauth1 import discover, noauth, session

from apikit import make_api
from fornace.api.app import create_app
from fornace.api.auth import NoAuth
from fornace.api.hosts import allowed_hosts
from serving import serving

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


def versions_of(href: str) -> dict:
    return {"versions": [{"id": "v1.0", "status": "CURRENT",
                          "links": [{"rel": "self", "href": href}]}]}


@pytest.fixture
def api(tmp_path):
    return make_api(f"sqlite:///{tmp_path / 'versions.sqlite'}")


@pytest.mark.parametrize("accept", [None, "*/*", "application/json",
                                    "text/html;q=0.5, application/json",
                                    "application/json, text/html"])
def test_the_root_lists_the_versions_with_300(api, accept):
    headers = {"Accept": accept} if accept else {}
    answer = api.client.get("/", headers=headers, follow_redirects=False)
    assert answer.status_code == 300
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == versions_of("http://testserver/v1/")


@pytest.mark.parametrize("path", ["/v1/", "/v1"])
def test_v1_describes_its_own_version(api, path):
    answer = api.client.get(path, follow_redirects=False)
    assert answer.status_code == 200
    assert answer.json() == {"version": versions_of("http://testserver/v1/")["versions"][0]}


def test_a_browser_at_the_root_goes_to_the_dashboard(api):
    answer = api.client.get("/", headers={"Accept": BROWSER}, follow_redirects=False)
    assert answer.status_code == 302 and answer.headers["location"] == "/dashboard/"
    page = api.client.get("/", headers={"Accept": BROWSER})
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert str(page.url) == "http://testserver/dashboard/"


def test_the_routes_stay_at_the_root_and_under_v1(api):
    created = api.client.post("/v1/environments", json={"name": "versioned"})
    assert created.status_code == 200
    for path in ("/environments", "/v1/environments"):
        listed = api.client.get(path)
        assert listed.status_code == 200
        assert [env["name"] for env in listed.json()["environments"]] == ["versioned"]
    assert api.client.get("/v1/nothing-here").status_code == 404
    assert api.client.get("/v1/v1/").status_code == 404


def test_links_follow_the_host_the_client_used_and_only_an_allowed_one(api, tmp_path):
    app = create_app(api.store, NoAuth("t1", "u1"),
                     allowed_hosts=allowed_hosts(["fornace.example.com"]))
    client = TestClient(app, base_url="http://fornace.example.com:8082")
    assert client.get("/").json() == versions_of("http://fornace.example.com:8082/v1/")
    refused = client.get("/", headers={"Host": "attacker.example.net"})
    assert refused.status_code == 400 and "attacker.example.net" in refused.json()["error"][
        "message"]


def test_a_public_endpoint_replaces_the_request_s_host(api):
    app = create_app(api.store, NoAuth("t1", "u1"),
                     public_endpoint="https://cloud.example.com:8443/orchestration/")
    client = TestClient(app)
    expected = versions_of("https://cloud.example.com:8443/orchestration/v1/")
    assert client.get("/").json() == expected
    assert client.get("/v1/").json() == {"version": expected["versions"][0]}


def test_keystoneauth_discovers_version_1(api):
    api.client.post("/environments", json={"name": "discovered"})
    with serving(api.client.app) as url:
        plain = session.Session()
        for where in (url, url + "/", url + "/v1", url + "/v1/"):
            data = discover.get_version_data(plain, where)
            assert data == versions_of(url + "/v1/")["versions"], where
        assert discover.Discover(plain, url).url_for((1, 0)) == url + "/v1/"

        # as a client given the unversioned endpoint (e.g. the catalog's) finds v1
        keyless = session.Session(auth=noauth.NoAuth())
        for endpoint in (url, url + "/v1"):
            found = keyless.get_endpoint_data(endpoint_override=endpoint,
                                              service_type="application-catalog",
                                              min_version="1.0", max_version="1.latest")
            assert (found.url, found.api_version) == (url + "/v1/", (1, 0)), endpoint
        # and the API answers at the version's link
        listed = keyless.get(found.url + "environments", headers={"X-Tenant-Id": "t1"}).json()
        assert [env["name"] for env in listed["environments"]] == ["discovered"]
