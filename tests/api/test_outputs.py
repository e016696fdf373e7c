"""The endpoints of a deployed environment: GET /environments/{id}/outputs."""
from __future__ import annotations

from fornace.api.outputs import environment_outputs
from test_jobs_api import api, deployed, linux_site  # noqa: F401 -- the fixture too


def farm_model() -> dict:
    return {"id": "e1", "name": "demo", "services": [
        {"id": "f1", "name": "hello-farm", "type": "linuxAppFarm",
         "state": {"proxyHostname": "hello1-lb", "address": "127.0.0.9",
                   "url": "http://127.0.0.9:8080/"},
         "units": [{"id": "u1", "name": "hello-farm_instance_0",
                    "state": {"hostname": "hello1", "address": "127.0.0.7",
                              "url": "http://127.0.0.7:8000/"}},
                   {"id": "u2", "name": "hello-farm_instance_1"}]},
        {"id": "d1", "name": "dc", "type": "activeDirectory",
         "units": [{"id": "u3", "name": "dc_instance_0",
                    "state": {"hostname": "dc1", "address": "10.0.0.5", "url": ""}}]},
    ]}


def test_outputs_list_service_and_unit_endpoints_and_nothing_guessed() -> None:
    found = environment_outputs(farm_model())
    farm, directory = found["services"]
    assert (farm["name"], farm["url"], farm["address"]) == (
        "hello-farm", "http://127.0.0.9:8080/", "127.0.0.9")
    assert farm["units"][0] == {"id": "u1", "name": "hello-farm_instance_0",
                                "hostname": "hello1", "address": "127.0.0.7",
                                "url": "http://127.0.0.7:8000/"}
    assert farm["units"][1] == {"id": "u2", "name": "hello-farm_instance_1",
                                "hostname": None, "address": None, "url": None}
    assert directory["url"] is None and directory["units"][0]["url"] is None
    assert found["urls"] == [
        {"service": "hello-farm", "unit": None, "url": "http://127.0.0.9:8080/"},
        {"service": "hello-farm", "unit": "hello-farm_instance_0",
         "url": "http://127.0.0.7:8000/"}]


def test_outputs_through_the_api(api) -> None:  # noqa: F811
    def serve(model: dict) -> None:
        for index, unit in enumerate(model["services"][0]["units"]):
            unit["state"] = {"hostname": f"web{index + 1}", "address": f"127.0.0.{index + 2}",
                             "url": f"http://127.0.0.{index + 2}:8080/"}
    env_id, _ = deployed(api, [linux_site("site")], change=serve)
    response = api.client.get(f"/environments/{env_id}/outputs")
    assert response.status_code == 200, response.text
    found = response.json()
    name = api.client.get(f"/environments/{env_id}").json()["name"]
    assert found["environment"] == {"id": env_id, "name": name}
    assert [u["url"] for u in found["urls"]] == ["http://127.0.0.2:8080/",
                                                 "http://127.0.0.3:8080/"]
    assert [u["hostname"] for u in found["services"][0]["units"]] == ["web1", "web2"]
    status = api.client.get(f"/environments/{env_id}/status").json()   # there too
    assert [u["url"] for u in status["services"][0]["units"]] == [u["url"] for u in found["urls"]]
    other = api.client.get(f"/environments/{env_id}/outputs", headers=api.as_tenant("t2"))
    assert other.status_code in (403, 404)
    assert api.client.get("/environments/nope/outputs").status_code == 404
