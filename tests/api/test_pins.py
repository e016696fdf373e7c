"""Environments pinned to workflow package versions over the API: pin the newest
or a given version, the plan of a move (files and types, with diffs), the
task carrying the versions (contract 1.8), visibility by project, deletion
refused while pinned, and the types of a pinned package in the environment's
catalog only."""
from __future__ import annotations

import json

import pytest

from apikit import Published
from packagekit import package_files, zip_of
from test_packages_api import packages_api, uploaded

GREET = """<workflow>
  <rule match="$[?(not @.temp.greeted)]" desc="greet">
    <set path="temp.greeted"><true/></set>
    <report entity="environment"><parameter name="id"><select path="id"/></parameter>
      <parameter name="text">{text}</parameter></report>
  </rule>
</workflow>
"""
NOTE_TYPE = {"extends": "linuxService",
             "schema": {"required": ["text"],
                        "properties": {"text": {"type": "string", "minLength": 1}}}}


def greet(version: str, text: str = "hi", types: dict | None = None) -> bytes:
    files = {"package.json": json.dumps({"name": "greet", "version": version}).encode(),
             "workflows/Greet.xml": GREET.format(text=text).encode()}
    if types is not None:
        files["types.json"] = json.dumps({"types": types}).encode()
    return zip_of(files)


@pytest.fixture
def api(tmp_path):
    made = packages_api(f"sqlite:///{tmp_path / 'pins.sqlite'}")
    made.published = Published()
    made.store._publish = made.published
    return made


def environment(api, name: str = "web", headers: dict | None = None) -> str:
    answer = api.client.post("/environments", json={"name": name}, headers=headers or {})
    assert answer.status_code == 200, answer.text
    return answer.json()["id"]


def put(api, env_id: str, name: str, body=None, headers: dict | None = None):
    return api.client.put(f"/environments/{env_id}/packages/{name}",
                          content=json.dumps(body) if body is not None else b"",
                          headers={"Content-Type": "application/json", **(headers or {})})


def test_pin_the_newest_then_move_with_a_plan(api):
    first = uploaded(api, greet("1.0.0", "one"))
    env_id = environment(api)
    answer = put(api, env_id, "greet")
    assert answer.status_code == 200, answer.text
    pinned = answer.json()
    assert pinned["moved"] and pinned["from"] is None and pinned["to"]["version"] == "1.0.0"
    assert pinned["files"]["added"] == ["package.json", "workflows/Greet.xml"]
    assert put(api, env_id, "greet", {}).json()["moved"] is False   # the newest already

    second = uploaded(api, greet("1.1.0", "two"))
    [pin] = api.client.get(f"/environments/{env_id}/packages").json()["packages"]
    assert (pin["version"], pin["newest"], pin["package_id"]) == ("1.0.0", "1.1.0",
                                                                   first["id"])
    plan = api.client.get(f"/environments/{env_id}/packages/greet/plan").json()
    assert plan["from"]["version"] == "1.0.0" and plan["to"]["version"] == "1.1.0"
    changes = {c["file"]: c for c in plan["files"]["changed"]}
    assert set(changes) == {"package.json", "workflows/Greet.xml"}   # the version too
    changed = changes["workflows/Greet.xml"]
    assert "-      <parameter name=\"text\">one</parameter></report>" in changed["diff"]
    assert "+      <parameter name=\"text\">two</parameter></report>" in changed["diff"]
    # the plan changed nothing
    [pin] = api.client.get(f"/environments/{env_id}/packages").json()["packages"]
    assert pin["version"] == "1.0.0"

    moved = put(api, env_id, "greet", {"version": "1.1.0"}).json()
    assert moved["moved"] and moved["to"]["package_id"] == second["id"]
    back = api.client.get(f"/environments/{env_id}/packages/greet/plan?version=1.0.0").json()
    assert back["from"]["version"] == "1.1.0" and back["to"]["version"] == "1.0.0"


def test_every_task_of_the_environment_names_its_versions(api):
    package = uploaded(api, greet("1.0.0"))
    env_id = environment(api)
    assert put(api, env_id, "greet", {"version": "1.0.0"}).status_code == 200
    session = api.client.post(f"/environments/{env_id}/configure").json()["id"]
    answer = api.client.post(f"/environments/{env_id}/sessions/{session}/deploy")
    assert answer.status_code == 200, answer.text
    body, _ = api.published.tasks[-1]
    assert body["packages"] == [{"id": package["id"], "name": "greet", "version": "1.0.0",
                                 "digest": package["digest"]}]
    other = environment(api, "plain")
    session = api.client.post(f"/environments/{other}/configure").json()["id"]
    api.client.post(f"/environments/{other}/sessions/{session}/deploy")
    assert "packages" not in api.published.tasks[-1][0]


def test_unknown_versions_and_other_projects_packages_are_not_found(api):
    uploaded(api, greet("1.0.0"))
    env_id = environment(api)
    answer = put(api, env_id, "greet", {"version": "9.9"})
    assert answer.status_code == 404
    assert "no version '9.9' of package 'greet'" in answer.text and "1.0.0" in answer.text
    assert put(api, env_id, "nothing").status_code == 404
    # t2 does not see t1's package; a public one it does
    theirs = environment(api, "theirs", api.as_tenant("t2"))
    refused = put(api, theirs, "greet", headers=api.as_tenant("t2"))
    assert refused.status_code == 404 and "can use" in refused.text
    uploaded(api, zip_of(package_files("shared")), {"X-Auth-Token": "admin"}, "?public=true")
    assert put(api, theirs, "shared", headers=api.as_tenant("t2")).status_code == 200
    # nor does t2 reach t1's environment
    assert put(api, env_id, "shared", headers=api.as_tenant("t2")).status_code in (403, 404)


@pytest.mark.parametrize("body", [[1], {"version": 3}, {"version": ""}, {"other": 1}])
def test_a_bad_move_body_is_a_400(api, body):
    uploaded(api, greet("1.0.0"))
    answer = put(api, environment(api), "greet", body)
    assert answer.status_code == 400, answer.text


def test_a_pinned_package_is_not_deleted_until_unpinned(api):
    package = uploaded(api, greet("1.0.0"))
    env_id = environment(api, "prod")
    put(api, env_id, "greet")
    refused = api.client.delete(f"/packages/{package['id']}")
    assert refused.status_code == 409 and "used by environments prod" in refused.text
    assert api.client.delete(f"/environments/{env_id}/packages/greet").status_code == 204
    assert api.client.delete(f"/environments/{env_id}/packages/greet").status_code == 404
    assert api.client.delete(f"/packages/{package['id']}").status_code == 204


def test_a_packages_types_are_the_pinned_environments_only(api):
    uploaded(api, greet("1.0.0", types={"greetNote": NOTE_TYPE}))
    pinned, plain = environment(api, "pinned"), environment(api, "plain")
    assert put(api, pinned, "greet").status_code == 200
    service = {"type": "greetNote", "name": "memo", "text": "hi",
               "osImage": {"name": "local", "type": "linux"}, "units": [{}]}

    def add(env_id: str, **fields):
        session = api.client.post(f"/environments/{env_id}/configure").json()["id"]
        return api.client.post(f"/environments/{env_id}/services", json={**service, **fields},
                               headers={"X-Configuration-Session": session})
    assert add(pinned).status_code == 200
    assert "text: must have at least 1 character" in add(pinned, name="m2", text="").text
    refused = add(plain)
    assert refused.status_code == 400 and "greetNote" in refused.text


def test_the_plan_names_the_types_a_move_adds(api):
    uploaded(api, greet("1.0.0"))
    uploaded(api, greet("2.0.0", types={"greetNote": NOTE_TYPE}))
    env_id = environment(api)
    put(api, env_id, "greet", {"version": "1.0.0"})
    plan = api.client.get(f"/environments/{env_id}/packages/greet/plan").json()
    assert plan["types"]["added"] == ["greetNote"] and plan["files"]["added"] == ["types.json"]



def test_the_newest_is_the_highest_version_not_the_last_uploaded(api):
    for version in ("1.9.0", "1.10.0", "1.0.2", "2.0.0rc1"):   # a hotfix after 1.10.0
        uploaded(api, greet(version))
    env_id = environment(api)
    assert put(api, env_id, "greet").json()["to"]["version"] == "2.0.0rc1"
    assert put(api, env_id, "greet", {"version": "1.0.2"}).status_code == 200
    [pin] = api.client.get(f"/environments/{env_id}/packages").json()["packages"]
    assert (pin["version"], pin["newest"]) == ("1.0.2", "2.0.0rc1")
    uploaded(api, greet("2.0.0"))
    assert api.client.get(f"/environments/{env_id}/packages/greet/plan").json()["to"][
        "version"] == "2.0.0"
    missing = put(api, env_id, "greet", {"version": "3"})
    assert "there are: 1.0.2, 1.9.0, 1.10.0, 2.0.0rc1, 2.0.0" in missing.text
