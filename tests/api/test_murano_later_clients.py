"""The Murano environment API as later Murano clients speak it: ``region`` on
create, ids in the ``"?"`` object header (and ``===id1===`` placeholders),
ids made on every path, and ``GET .../model/{path}``."""
from __future__ import annotations

import pytest

from apikit import make_api
from fornace.common.db.models import Environment

SESSION = "X-Configuration-Session"
SERVICE_ID = "a" * 32
UNIT_ID = "b" * 32


@pytest.fixture
def api(tmp_path):
    return make_api(f"sqlite:///{tmp_path / 'later.sqlite'}")


def site(**extra) -> dict:
    return {"name": "site", "type": "linuxWebServer", "osImage": {"name": "debian-12"},
            "units": [{}], **extra}


def opened(api, name: str = "env", **body) -> tuple[str, dict[str, str]]:
    env_id = api.client.post("/environments", json={"name": name, **body}).json()["id"]
    session = api.client.post(f"/environments/{env_id}/configure").json()["id"]
    return env_id, {SESSION: session}


def services_of(api, env_id: str, headers: dict[str, str]) -> list[dict]:
    return api.client.get(f"/environments/{env_id}/services", headers=headers).json()


# -- region -------------------------------------------------------------------

def test_a_region_is_stored_shown_and_sent_with_every_task(api):
    created = api.client.post("/environments", json={"name": "r", "region": "RegionTwo"})
    assert created.status_code == 200 and created.json()["region"] == "RegionTwo"
    env_id = created.json()["id"]
    assert api.client.get(f"/environments/{env_id}").json()["region"] == "RegionTwo"
    assert [e["region"] for e in api.client.get("/environments").json()["environments"]] == \
        ["RegionTwo"]
    with api.store.sessions() as db:
        assert db.get(Environment, env_id).region == "RegionTwo"
    session = api.client.post(f"/environments/{env_id}/configure").json()["id"]
    assert api.client.get(f"/environments/{env_id}/model").json()["region"] == "RegionTwo"
    api.client.post(f"/environments/{env_id}/services", json=site(), headers={SESSION: session})
    assert api.client.post(f"/environments/{env_id}/sessions/{session}/deploy").status_code == 200
    task, job_id = api.published.tasks[-1]
    assert task["region"] == "RegionTwo"
    # the column decides, whatever a workflow wrote in the model it returned
    task["region"] = "Elsewhere"
    from fornace.common import contract
    api.store.results.apply(contract.result_body(task), job_id)
    assert api.client.delete(f"/environments/{env_id}").status_code == 200
    assert api.published.tasks[-1][0]["deleted"] and \
        api.published.tasks[-1][0]["region"] == "RegionTwo"


def test_a_null_or_absent_region_is_none_and_not_in_the_task(api):
    for body in ({"name": "plain"}, {"name": "null", "region": None}):
        env = api.client.post("/environments", json=body).json()
        assert env["region"] is None
        assert "region" not in api.client.get(f"/environments/{env['id']}/model").json()


@pytest.mark.parametrize("region, message", [
    ("", "region: Value error, must not be empty"),
    ("x" * 256, "region: String should have at most 255 characters"),
    ("Region\nOne", "region: Value error, must not contain control characters such as U+000A"),
    (7, "region: Input should be a valid string"),
])
def test_a_bad_region_is_a_clear_400(api, region, message):
    answer = api.client.post("/environments", json={"name": "bad", "region": region})
    assert answer.status_code == 400
    assert message in answer.json()["error"]["message"]
    assert api.client.get("/environments").json()["environments"] == []


def test_rename_takes_no_region(api):
    env_id = api.client.post("/environments", json={"name": "r", "region": "R1"}).json()["id"]
    answer = api.client.put(f"/environments/{env_id}", json={"name": "n", "region": "R2"})
    assert answer.status_code == 400 and "region" in answer.json()["error"]["message"]
    assert api.client.put(f"/environments/{env_id}", json={"name": "n"}).json()["region"] == "R1"


# -- "?" object headers ---------------------------------------------------------

def test_post_takes_the_ids_and_type_of_the_object_headers(api):
    env_id, headers = opened(api)
    body = site(units=[{"?": {"id": UNIT_ID, "type": "io.murano.resources.LinuxInstance"}}])
    del body["type"]
    body["?"] = {"id": SERVICE_ID, "type": "linuxWebServer", "name": "shown name"}
    added = api.client.post(f"/environments/{env_id}/services", json=body, headers=headers)
    assert added.status_code == 200, added.text
    service = added.json()
    assert (service["id"], service["type"]) == (SERVICE_ID, "linuxWebServer")
    assert service["?"] == {"id": SERVICE_ID, "type": "linuxWebServer", "name": "shown name"}
    assert service["units"][0]["id"] == UNIT_ID
    assert service["units"][0]["?"]["type"] == "io.murano.resources.LinuxInstance"
    assert api.client.get(f"/environments/{env_id}/services/{SERVICE_ID}/units/{UNIT_ID}",
                          headers=headers).json()["name"] == "site_instance_0"


def test_a_header_without_an_id_gets_the_service_s_new_id(api):
    env_id, headers = opened(api)
    service = api.client.post(f"/environments/{env_id}/services",
                              json=site(**{"?": {"type": "linuxWebServer"}}),
                              headers=headers).json()
    assert len(service["id"]) == 32 and service["?"]["id"] == service["id"]


@pytest.mark.parametrize("header, field, words", [
    ({"id": "c" * 32}, "?.id", "but id is"),
    ({"type": "webServer"}, "?.type", "but type is"),
    ({"id": "has space"}, "?.id", "must"),
    ("abc", "?", "must be an object"),
])
def test_a_header_that_cannot_be_used_is_a_400_naming_it(api, header, field, words):
    env_id, headers = opened(api)
    answer = api.client.post(f"/environments/{env_id}/services",
                             json=site(id=SERVICE_ID, **{"?": header}), headers=headers)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["message"].startswith(f"{field}: ") and words in error["message"]
    assert services_of(api, env_id, headers) == []


def test_put_of_the_whole_list_honours_headers_and_makes_missing_ids(api):
    """What ``environment apps edit`` sends: the services after a JSON patch."""
    env_id, headers = opened(api)
    listed = [site(**{"?": {"id": SERVICE_ID, "type": "linuxWebServer"}}),
              site(name="other", units=[{}, {"?": {"id": UNIT_ID}}])]
    answer = api.client.put(f"/environments/{env_id}/services", json=listed, headers=headers)
    assert answer.status_code == 200, answer.text
    stored = services_of(api, env_id, headers)
    assert stored[0]["id"] == SERVICE_ID
    assert len(stored[1]["id"]) == 32 and stored[1]["id"] != SERVICE_ID
    assert stored[1]["units"][1]["id"] == UNIT_ID and len(stored[1]["units"][0]["id"]) == 32
    assert all(unit.get("name") for service in stored for unit in service["units"])


def test_put_below_a_service_replacing_it_without_an_id_gives_it_one(api):
    env_id, headers = opened(api)
    api.client.post(f"/environments/{env_id}/services", json=site(id=SERVICE_ID),
                    headers=headers)
    answer = api.client.put(f"/environments/{env_id}/services/0", json=site(name="new"),
                            headers=headers)
    assert answer.status_code == 200, answer.text
    [service] = services_of(api, env_id, headers)
    assert service["name"] == "new" and len(service["id"]) == 32


def test_ids_two_objects_would_share_are_a_400(api):
    env_id, headers = opened(api)
    twice = [site(id=SERVICE_ID), site(name="b", **{"?": {"id": SERVICE_ID}})]
    answer = api.client.put(f"/environments/{env_id}/services", json=twice, headers=headers)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith(
        f"services[1].id: id '{SERVICE_ID}' is already used in this environment")
    unit_too = [site(id=SERVICE_ID, units=[{"id": SERVICE_ID}])]
    answer = api.client.put(f"/environments/{env_id}/services", json=unit_too, headers=headers)
    assert answer.status_code == 400 and "services[0].units[0].id" in answer.text
    assert services_of(api, env_id, headers) == []


def test_placeholders_become_new_ids_one_per_placeholder(api):
    env_id, headers = opened(api)
    body = [site(**{"?": {"id": "===id1===", "type": "linuxWebServer"}}),
            site(name="b", dependsOn=["===id1==="], units=[{"?": {"id": "===id2==="}}])]
    answer = api.client.put(f"/environments/{env_id}/services", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    first, second = services_of(api, env_id, headers)
    assert len(first["id"]) == 32 and "=" not in first["id"]
    assert second["dependsOn"] == [first["id"]]
    assert second["units"][0]["id"] not in (first["id"], "===id2===")


# -- GET .../model/{path} ---------------------------------------------------------

def test_model_paths_as_muranoclient_asks_for_them(api):
    env_id, headers = opened(api, region="R1")
    api.client.post(f"/environments/{env_id}/services",
                    json=site(id=SERVICE_ID, adminPassword="s3cret-pass"), headers=headers)
    whole = api.client.get(f"/environments/{env_id}/model//", headers=headers).json()
    assert whole["region"] == "R1" and whole["services"][0]["id"] == SERVICE_ID
    services = api.client.get(f"/environments/{env_id}/model//services", headers=headers)
    assert services.status_code == 200 and [s["id"] for s in services.json()] == [SERVICE_ID]
    assert services.json()[0]["adminPassword"] == "***"
    unit = api.client.get(f"/environments/{env_id}/model//services/{SERVICE_ID}/units/0",
                          headers=headers).json()
    assert unit["name"] == "site_instance_0"
    assert api.client.get(f"/environments/{env_id}/model/services/0/adminPassword",
                          headers=headers).json() == "***"
    assert api.client.get(f"/environments/{env_id}/model/name").json() == "env"
    # the environment's own model (no session): no service yet
    assert api.client.get(f"/environments/{env_id}/model//services").json() == []


def test_a_model_path_that_is_not_there_is_a_404_naming_it(api):
    env_id, headers = opened(api)
    answer = api.client.get(f"/environments/{env_id}/model//services/nope", headers=headers)
    assert answer.status_code == 404
    assert answer.json()["error"]["message"] == \
        f"'/services/nope' not found in the model of environment {env_id}"


def test_another_tenant_reads_no_model_path(api):
    env_id, headers = opened(api)
    api.client.post(f"/environments/{env_id}/services", json=site(), headers=headers)
    other = api.as_tenant("t2")
    for path in ("/model//services", "/model/name", "/model//"):
        answer = api.client.get(f"/environments/{env_id}{path}", headers={**other, **headers})
        assert answer.status_code == 403, (path, answer.text)
        assert "site" not in answer.text
