"""``GET /types`` and ``GET /types/{name}``: the service-type catalog the API
validates with, served to its clients (``fornace type``, ``fornace service
add``) -- the built-in one, and one a data folder adds a type to."""
from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from apikit import make_api
from fornace.api import specs
from fornace.api.server import ApiService
from fornace.cli.main import build_conf
from fornace.common.catalog import Catalog, TypeInfo
from fornace.common.resources import BUILTIN_DATA

NOTE = {"extends": "linuxService", "doc": "Writes a note on each unit.", "schema": {
    "description": "a note written on each unit",
    "required": ["type", "name", "text", "units"],
    "properties": {
        "text": {"type": "string", "x-check": "nonblank", "maxLength": 200,
                 "title": "Note text", "description": "What each unit writes down."},
        "copies": {"type": "integer", "minimum": 1, "maximum": 5, "default": 1},
        "signature": {"type": "string", "writeOnly": True, "title": "Signature"},
        "units": {"minItems": 1, "maxItems": 3}}}}


@pytest.fixture
def api(tmp_path):
    return make_api(f"sqlite:///{tmp_path / 'types.sqlite'}")


@pytest.fixture
def note_api(tmp_path):
    """``ApiService`` as ``fornace api`` starts it, on a data folder whose
    ``types.json`` adds ``linuxNote`` to the built-in types."""
    data = tmp_path / "data"
    data.mkdir()
    document = json.loads((BUILTIN_DATA / "types.json").read_text())
    document["types"]["linuxNote"] = NOTE
    (data / "types.json").write_text(json.dumps(document))
    conf = build_conf()
    conf(["api"], default_config_files=[], default_config_dirs=[])
    conf.set_override("data_dir", str(data))
    conf.set_override("url", "memory://", group="broker")
    service = ApiService(conf, f"sqlite:///{tmp_path / 'notes.sqlite'}")
    try:
        yield TestClient(service.app)
    finally:
        service.stop()


def test_the_list_names_each_type_its_parents_and_operations(api):
    answer = api.client.get("/types")
    assert answer.status_code == 200, answer.text
    types = {t["name"]: t for t in answer.json()["types"]}
    assert list(types) == sorted(types)
    assert set(specs.SERVICE_TYPES) < set(types)          # the concrete ones, and more
    assert types["service"]["abstract"] is True and types["service"]["parents"] == []
    web = types["linuxWebServer"]
    assert web["abstract"] is False and web["extends"] == "linuxService"
    assert web["parents"] == ["linuxService", "service"]
    assert {"check", "restart", "monitor", "run"} <= set(web["operations"])
    assert web["description"] == specs.SERVICE_TYPES["linuxWebServer"].doc
    assert api.client.get("/v1/types").json() == answer.json()
    # any caller may read it (noauth: any project)
    assert api.client.get("/types", headers=api.as_tenant("t9", "u9")).status_code == 200


def test_a_type_in_full_has_its_merged_schema_operations_and_form_hints(api):
    answer = api.client.get("/types/linuxWebServer")
    assert answer.status_code == 200, answer.text
    web = answer.json()
    spec = specs.SERVICE_TYPES["linuxWebServer"]
    assert web["schema"] == spec.schema                   # what the API validates with
    assert {"port", "osImage", "name", "units"} <= set(web["schema"]["properties"])
    assert "extends" not in web["schema"]
    operations = {op["name"]: op for op in web["operations"]}
    assert operations["monitor"] == {"name": "monitor", "implemented": False,
                                     "declared_by": "service"}
    assert operations["check"]["implemented"] and \
        operations["check"]["declared_by"] == "linuxWebServer"
    fields = {f["name"]: f for f in web["fields"]}
    assert "units" not in fields and fields["name"]["required"] is True
    assert fields["name"]["title"] == "Name"
    assert set(fields) == set(spec.service_fields())
    assert web["min_units"] == spec.min_units

    base = api.client.get("/types/service").json()          # abstract: its own schema
    assert base["abstract"] is True and "name" in base["schema"]["properties"]
    secret = api.client.get("/types/webServer").json()
    assert any(f["secret"] for f in secret["fields"]) == bool(specs.SERVICE_TYPES[
        "webServer"].secrets)


def test_an_unknown_type_is_a_404_naming_it_and_the_known_ones(api):
    answer = api.client.get("/types/linuxWebSrver")
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert "'linuxWebSrver'" in error["message"] and "linuxWebServer" in error["message"]
    assert "linuxWebServer" in error["known"] and "service" in error["known"]


def test_the_openapi_document_describes_the_routes(api):
    schema = api.client.get("/openapi.json").json()
    for path, model in (("/types", "TypeList"), ("/types/{name}", "TypeDetail")):
        responses = schema["paths"][path]["get"]["responses"]
        assert responses["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
            model), path
        assert "403" in responses
    assert "404" in schema["paths"]["/types/{name}"]["get"]["responses"]
    detail = schema["components"]["schemas"]["TypeDetail"]["properties"]
    assert {"schema", "operations", "fields", "unit_fields", "parents"} <= set(detail)


def test_a_type_the_data_folder_adds_is_served_and_checks_as_the_api_does(note_api):
    listed = {t["name"]: t for t in note_api.get("/types").json()["types"]}
    assert "linuxNote" not in specs.SERVICE_TYPES and "linuxNote" in listed
    assert listed["linuxNote"]["description"] == "a note written on each unit"
    assert listed["linuxNote"]["doc"] == "Writes a note on each unit."
    note = note_api.get("/types/linuxNote").json()
    assert note["parents"] == ["linuxService", "service"]
    # its instances come from the Linux instance rules: linuxService's keys, inherited
    assert note["instance"] == {"template": "LinuxInstance", "image": "linux"}
    properties = note["schema"]["properties"]
    assert {"text", "copies", "signature", "osImage", "name"} <= set(properties)
    assert properties["units"]["maxItems"] == 3 and note["max_units"] == 3
    fields = {f["name"]: f for f in note["fields"]}
    assert fields["signature"]["secret"] and not fields["text"]["secret"]
    assert fields["text"]["title"] == "Note text" and fields["copies"]["default"] == 1

    # the schema served is enough to check a service as the API does, with its code
    served = Catalog({"linuxNote": TypeInfo(name="linuxNote", schema=note["schema"])})
    env = note_api.post("/environments", json={"name": "notes"}).json()
    session = note_api.post(f"/environments/{env['id']}/configure").json()["id"]
    for bad in ({"copies": 9}, {"text": " "}, {"colour": 1}, {"units": [{}] * 4}):
        service = {"type": "linuxNote", "name": "memo", "text": "hi", "osImage": "local",
                   "units": [{}], **bad}
        with pytest.raises(specs.SpecError) as caught:
            specs.validate_create(service, served)
        refused = note_api.post(f"/environments/{env['id']}/services", json=service,
                                headers={"X-Configuration-Session": session})
        assert refused.status_code == 400
        assert refused.json()["error"]["message"] == str(caught.value), bad


def test_an_environments_types_add_those_of_its_pinned_packages(tmp_path):
    from test_packages_api import packages_api, uploaded
    from test_pins import NOTE_TYPE, environment, greet, put

    api = packages_api(f"sqlite:///{tmp_path / 'pinned.sqlite'}")
    uploaded(api, greet("1.0.0", types={"pinnedNote": NOTE_TYPE}))
    env_id = environment(api)
    assert put(api, env_id, "greet").status_code == 200
    query = f"?environment={env_id}"
    assert api.client.get("/types/pinnedNote").status_code == 404     # not the API's
    listed = [t["name"] for t in api.client.get(f"/types{query}").json()["types"]]
    assert "pinnedNote" in listed and "linuxWebServer" in listed
    note = api.client.get(f"/types/pinnedNote{query}")
    assert note.status_code == 200, note.text
    assert note.json()["parents"] == ["linuxService", "service"]
    assert "text" in note.json()["schema"]["properties"]
    other = {"X-Tenant-Id": "t2", "X-User-Id": "u2"}                 # another project
    refused = api.client.get(f"/types/pinnedNote{query}", headers=other)
    assert refused.status_code == 403 and env_id in refused.json()["error"]["message"]
    missing = api.client.get("/types?environment=0123456789abcdef0123456789abcdef")
    assert missing.status_code == 404 and "environment" in missing.json()["error"]["message"]
