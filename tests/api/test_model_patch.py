"""Murano's ``PATCH /environments/{id}/model/`` (a JSON patch of a session's
object model, ``application/env-model-json-patch``) and ``defaultNetworks``
on create, as later Murano clients send them."""
from __future__ import annotations

import json

import pytest

from apikit import make_api
from fornace.api import modelpatch
from fornace.common.db.models import ConfigSession

SESSION = "X-Configuration-Session"
PATCH_TYPE = "application/env-model-json-patch"
SERVICE_ID = "a" * 32
NETWORK_ID = "c" * 32
PASSWORD = "S3cret-pass-1"


@pytest.fixture
def api(tmp_path):
    return make_api(f"sqlite:///{tmp_path / 'patch.sqlite'}")


def site(**extra) -> dict:
    return {"name": "site", "type": "linuxWebServer", "osImage": {"name": "debian-12"},
            "units": [{}], **extra}


def joined(net: str = "net-1", subnet: str | None = None) -> dict:
    """``defaultNetworks`` as python-muranoclient 2.8 sends it for --join-net-id."""
    network = {"?": {"id": NETWORK_ID, "type": "io.murano.resources.ExistingNeutronNetwork"},
               "internalNetworkName": net}
    if subnet is not None:
        network["internalSubnetworkName"] = subnet
    return {"environment": network, "flat": None}


def opened(api, **body) -> tuple[str, dict[str, str]]:
    env_id = api.client.post("/environments", json={"name": "env", **body}).json()["id"]
    session = api.client.post(f"/environments/{env_id}/configure").json()["id"]
    return env_id, {SESSION: session}


def patched(api, env_id: str, headers: dict[str, str], patch, prefix: str = "/v1",
            content_type: str = PATCH_TYPE, extra: dict | None = None):
    return api.client.patch(f"{prefix}/environments/{env_id}/model/",
                            content=json.dumps(patch).encode(),
                            headers={**headers, "Content-Type": content_type, **(extra or {})})


def model_of(api, env_id: str, headers: dict[str, str]) -> dict:
    return api.client.get(f"/environments/{env_id}/model", headers=headers).json()


# -- model edit -------------------------------------------------------------------

def test_a_patch_adds_a_service_with_new_ids_and_answers_the_masked_model(api):
    env_id, headers = opened(api, region="R1")
    answer = patched(api, env_id, headers, [
        {"op": "add", "path": "/services/-", "value": site(adminPassword=PASSWORD)}])
    assert answer.status_code == 200, answer.text
    model = answer.json()
    [service] = model["services"]
    assert len(service["id"]) == 32 and len(service["units"][0]["id"]) == 32
    assert service["units"][0]["name"] == "site_instance_0"
    assert service["created"] == service["updated"]
    assert service["adminPassword"] == "***" and PASSWORD not in answer.text
    assert model["region"] == "R1" and model["name"] == "env"
    # stored in the session only, with the real password
    with api.store.sessions() as db:
        stored = db.get(ConfigSession, headers[SESSION]).description["services"]
    assert stored[0]["adminPassword"] == PASSWORD
    assert api.client.get(f"/environments/{env_id}/model").json()["services"] == []


def test_paths_name_list_items_by_id_or_index_and_placeholders_become_ids(api):
    env_id, headers = opened(api)
    patched(api, env_id, headers, [{"op": "add", "path": "/services/-",
                                    "value": site(id=SERVICE_ID, adminPassword=PASSWORD)}])
    answer = patched(api, env_id, headers, [
        {"op": "replace", "path": f"/services/{SERVICE_ID}/name", "value": "renamed"},
        {"op": "add", "path": "/services/0/units/-", "value": {"?": {"id": "===id1==="}}},
        {"op": "add", "path": "/services/-", "value": site(
            name="other", **{"?": {"id": "===id2===", "type": "linuxWebServer"}})},
        {"op": "add", "path": f"/services/{SERVICE_ID}/dependsOn", "value": ["===id2==="]}])
    assert answer.status_code == 200, answer.text
    first, second = model_of(api, env_id, headers)["services"]
    assert first["name"] == "renamed" and first["id"] == SERVICE_ID
    new_unit = first["units"][1]
    assert len(new_unit["id"]) == 32 and "=" not in new_unit["id"]
    assert new_unit["?"]["id"] == new_unit["id"] and new_unit["name"] == "renamed_instance_1"
    assert len(second["id"]) == 32 and second["?"]["id"] == second["id"]
    assert first["dependsOn"] == [second["id"]]
    # the password kept through the edits, a "***" written back keeps it too
    assert patched(api, env_id, headers, [{"op": "replace", "path": "/services/0/adminPassword",
                                           "value": "***"}]).status_code == 200
    with api.store.sessions() as db:
        stored = db.get(ConfigSession, headers[SESSION]).description["services"]
    assert stored[0]["adminPassword"] == PASSWORD


def test_removing_a_service_and_replacing_the_list(api):
    env_id, headers = opened(api)
    patched(api, env_id, headers, [{"op": "add", "path": "/services/-",
                                    "value": site(id=SERVICE_ID)}])
    assert patched(api, env_id, headers, [{"op": "remove", "path": f"/services/{SERVICE_ID}"}]
                   ).json()["services"] == []
    answer = patched(api, env_id, headers, [{"op": "replace", "path": "/services",
                                             "value": [site(), site(name="b")]}])
    assert [s["name"] for s in answer.json()["services"]] == ["site", "b"]


@pytest.mark.parametrize("change, field, words", [
    ({"op": "replace", "path": "/services/0/name", "value": "bad\nname"}, "services[0].name",
     "control characters"),
    ({"op": "remove", "path": "/services/0/name"}, "services[0].name", "required"),
    ({"op": "replace", "path": "/services/0/osImage", "value": 7},
     "services[0].osImage", "must be"),
    ({"op": "add", "path": "/services/0/units/0/id", "value": "x y"},
     "services[0].units[0].id", "must be an id"),
    ({"op": "add", "path": "/services/-", "value": site()}, None, "a service named 'site'"),
    ({"op": "replace", "path": "/services", "value": {"a": 1}}, "services", "must be a list"),
])
def test_a_patch_leaving_an_invalid_model_is_refused_naming_the_path(api, change, field,
                                                                      words):
    env_id, headers = opened(api)
    patched(api, env_id, headers, [{"op": "add", "path": "/services/-",
                                    "value": site(id=SERVICE_ID)}])
    before = model_of(api, env_id, headers)
    answer = patched(api, env_id, headers, [change])
    assert answer.status_code in (400, 409), answer.text
    error = answer.json()["error"]
    if field is not None:
        assert answer.status_code == 400 and error["field"] == field
        assert error["message"].startswith(f"{field}: ")
    assert words in error["message"]
    assert model_of(api, env_id, headers) == before


@pytest.mark.parametrize("change, status, words", [
    ({"op": "replace", "path": "/region", "value": "R2"}, 403,
     "change 1 (replace /region): /region cannot be changed: an environment's region is "
     "given when it is created"),
    ({"op": "replace", "path": "/name", "value": "n"}, 403, "rename the environment"),
    ({"op": "replace", "path": "/id", "value": "x"}, 403, "id never changes"),
    ({"op": "add", "path": "/anything", "value": 1}, 403,
     "model edit changes only /services and /defaultNetworks"),
    ({"op": "replace", "path": "", "value": {}}, 403, "the whole model cannot be changed"),
    ({"op": "remove", "path": "/services"}, 403, "/services cannot be removed"),
    ({"op": "replace", "path": "/defaultNetworks/environment/?/id", "value": "d" * 32}, 403,
     "a network's id cannot be changed"),
    ({"op": "move", "from": "/services/0", "path": "/services/1"}, 403,
     "op 'move' is not allowed: the object model takes add, replace, remove"),
    ({"op": "copy", "from": "/services/0/adminPassword", "path": "/services/0/name"}, 403,
     "op 'copy' is not allowed"),
    ({"op": "test", "path": "/services/0/adminPassword", "value": PASSWORD}, 403,
     "op 'test' is not allowed"),
    ({"op": "frob", "path": "/services"}, 400, "unknown op 'frob'"),
    ({"op": "add", "path": "/services/-"}, 400, "change 1 (add /services/-): add needs a value"),
    ({"op": "add", "path": "services/-", "value": {}}, 400, "is not a JSON pointer"),
    ({"path": "/services"}, 400, "op is missing"),
    ({"op": "replace", "path": "/services/nope/name", "value": "n"}, 400,
     "change 1 (replace /services/nope/name): /services has no 'nope'"),
    ({"op": "add", "path": "/services/0/name/x", "value": "n"}, 400,
     "/services/0/name is not an object or a list"),
])
def test_what_a_patch_may_not_do_is_refused_saying_so(api, change, status, words):
    env_id, headers = opened(api)
    patched(api, env_id, headers, [{"op": "add", "path": "/services/-",
                                    "value": site(adminPassword=PASSWORD)}])
    before = model_of(api, env_id, headers)
    answer = patched(api, env_id, headers, [change])
    assert answer.status_code == status, answer.text
    assert words in answer.json()["error"]["message"]
    assert PASSWORD not in answer.text
    assert model_of(api, env_id, headers) == before


@pytest.mark.parametrize("body, words", [
    ({"op": "add"}, "must be a JSON patch: a list of changes"),
    ([], "the JSON patch is empty"),
    (["add"], "change 1: must be an object"),
])
def test_a_body_that_is_not_a_patch_is_a_400(api, body, words):
    env_id, headers = opened(api)
    answer = patched(api, env_id, headers, body)
    assert answer.status_code == 400 and words in answer.json()["error"]["message"]


def test_the_patch_types_and_paths_the_api_takes(api):
    env_id, headers = opened(api)
    change = [{"op": "add", "path": "/services/-", "value": site()}]
    for prefix, content_type in (("", "application/json"), ("/v1", "application/json-patch+json")):
        answer = patched(api, env_id, headers, change, prefix=prefix, content_type=content_type)
        assert answer.status_code == 200, answer.text
        change = [{"op": "remove", "path": "/services/0"}]
    bad = api.client.patch(f"/v1/environments/{env_id}/model/", content=b"[{",
                           headers={**headers, "Content-Type": PATCH_TYPE})
    assert bad.status_code == 400 and "malformed JSON body" in bad.json()["error"]["message"]
    # the patch type is taken on the model only
    elsewhere = api.client.put(f"/environments/{env_id}/services", content=b"[]",
                               headers={**headers, "Content-Type": PATCH_TYPE})
    assert elsewhere.status_code == 415
    # a form's type is not, even there (a browser sends it without a preflight)
    form = api.client.patch(f"/environments/{env_id}/model/", content=b"[]",
                            headers={**headers, "Content-Type": "text/plain"})
    assert form.status_code == 415


def test_a_patch_needs_a_session_of_the_caller_s_project(api):
    env_id, headers = opened(api)
    change = [{"op": "add", "path": "/services/-", "value": site()}]
    answer = patched(api, env_id, {}, change)
    assert answer.status_code == 400 and "X-Configuration-Session" in answer.text
    other = patched(api, env_id, headers, change, extra=api.as_tenant("t2"))
    assert other.status_code == 403
    assert model_of(api, env_id, headers)["services"] == []


def test_a_patched_session_deploys_the_patched_model(api):
    env_id, headers = opened(api, defaultNetworks=joined())
    patched(api, env_id, headers, [{"op": "add", "path": "/services/-", "value": site()}])
    deploy = api.client.post(f"/environments/{env_id}/sessions/{headers[SESSION]}/deploy")
    assert deploy.status_code == 200, deploy.text
    task, _ = api.published.tasks[-1]
    assert [s["name"] for s in task["services"]] == ["site"]
    assert task["defaultNetworks"]["environment"]["internalNetworkName"] == "net-1"


# -- defaultNetworks ----------------------------------------------------------------

def test_default_networks_are_kept_in_the_model(api):
    answer = api.client.post("/environments", json={
        "name": "joined", "region": None, "defaultNetworks": joined("net-1", "sub-1")})
    assert answer.status_code == 200, answer.text
    env_id = answer.json()["id"]
    networks = api.client.get(f"/environments/{env_id}/model/defaultNetworks").json()
    assert networks == joined("net-1", "sub-1")
    # a network without an id in its header gets one
    answer = api.client.post("/environments", json={
        "name": "no-id", "defaultNetworks": {"environment": {"internalNetworkName": "n"}}})
    env_id = answer.json()["id"]
    networks = api.client.get(f"/environments/{env_id}/model/defaultNetworks").json()
    assert len(networks["environment"]["?"]["id"]) == 32 and networks["flat"] is None
    plain = api.client.post("/environments", json={"name": "plain"}).json()["id"]
    assert "defaultNetworks" not in api.client.get(f"/environments/{plain}/model").json()


@pytest.mark.parametrize("networks, message", [
    ("net", "defaultNetworks: Input should be a valid dictionary"),
    ({"environment": {"internalNetworkName": ""}},
     "defaultNetworks.environment.internalNetworkName: must not be empty"),
    ({"environment": {"internalNetworkName": "n\n"}},
     "defaultNetworks.environment.internalNetworkName: must not contain control characters"),
    ({"environment": {"internalNetworkName": "n", "password": "x"}},
     "defaultNetworks.environment.password: not permitted"),
    ({"environment": {"?": {"id": "has space"}}}, "defaultNetworks.environment.?.id: must be"),
    ({"environment": "net"}, "defaultNetworks.environment: must be a network object or null"),
    ({"environment": None, "other": None}, "defaultNetworks.other: not permitted"),
    ({"flat": {"autoUplink": "yes"}}, "defaultNetworks.flat.autoUplink: must be a boolean"),
    ({"environment": {"dnsNameServers": ["8.8.8.8"] * 17}},
     "defaultNetworks.environment.dnsNameServers: at most 16"),
])
def test_bad_default_networks_are_a_400_naming_the_field(api, networks, message):
    answer = api.client.post("/environments", json={"name": "bad", "defaultNetworks": networks})
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith(message), answer.text
    assert api.client.get("/environments").json()["environments"] == []


def test_model_edit_changes_the_default_networks(api):
    env_id, headers = opened(api, defaultNetworks=joined())
    answer = patched(api, env_id, headers, [
        {"op": "replace", "path": "/defaultNetworks/environment/internalNetworkName",
         "value": "net-2"},
        {"op": "add", "path": "/defaultNetworks/environment/internalSubnetworkName",
         "value": "sub-2"}])
    assert answer.status_code == 200, answer.text
    assert answer.json()["defaultNetworks"] == joined("net-2", "sub-2")
    bad = patched(api, env_id, headers, [{"op": "add", "path": "/defaultNetworks/flat",
                                          "value": {"dnsNameServers": "8.8.8.8"}}])
    assert bad.status_code == 400
    assert bad.json()["error"]["field"] == "defaultNetworks.flat.dnsNameServers"
    # replaced whole, the new network gets an id; removed, the environment joins none
    fresh = patched(api, env_id, headers, [{"op": "replace", "path": "/defaultNetworks",
                                            "value": {"environment": {"name": "own"}}}])
    network = fresh.json()["defaultNetworks"]["environment"]
    assert network["name"] == "own" and len(network["?"]["id"]) == 32
    gone = patched(api, env_id, headers, [{"op": "remove", "path": "/defaultNetworks"}])
    assert "defaultNetworks" not in gone.json()
    # the environment's own model is untouched until the session is deployed
    assert api.client.get(f"/environments/{env_id}/model").json()["defaultNetworks"] == \
        joined()


def test_a_patch_looking_through_too_many_list_items_is_refused(api, monkeypatch):
    monkeypatch.setattr(modelpatch, "MAX_SCANNED", 50)
    env_id, headers = opened(api)
    patched(api, env_id, headers, [{"op": "add", "path": "/services/-",
                                    "value": site(extra=list(range(40)))}])
    changes = [{"op": "replace", "path": "/services/0/extra/39", "value": 0}] * 2
    answer = patched(api, env_id, headers, changes)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == (
        "change 2 (replace /services/0/extra/39): the patch looks through more than 50 "
        "list items for ids: name fewer items, or send it in parts")
    assert model_of(api, env_id, headers)["services"][0]["extra"][39] == 39
