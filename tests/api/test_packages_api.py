"""Workflow packages over the API: upload (checked as ``fornace workflow check``
checks, errors as file:line), immutable versions, visibility by project and
public, download as uploaded, delete; on SQLite and on PostgreSQL."""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from apikit import Api, Published, reset_postgres
from packagekit import package_files, tar_of, zip_of
from services import postgres_url
from fornace.api.app import create_app
from fornace.api.auth import NoAuth
from fornace.api.stores.jobs import Jobs
from fornace.api.packages.store import Packages
from fornace.api.context import Context
from fornace.api.stores.store import Store
from fornace.common.db.engine import make_engine, session_factory, upgrade
from fornace.common.packages.archive import PackageLimits
from fornace.conductor.packages.check import package_checker

ZIP_TYPE = {"Content-Type": "application/zip"}
ADMIN = Context("p-admin", "u-root", roles=frozenset({"admin", "member"}), user_name="root",
                project_name="admin", project_domain_id="default")


class Callers:
    """noauth, except the token ``admin``: the cloud admin."""

    def __init__(self) -> None:
        self.noauth = NoAuth("t1", "u1")

    def context(self, headers):
        if headers.get("x-auth-token") == "admin":
            return ADMIN
        return self.noauth.context(headers)


def packages_api(url: str, limits: PackageLimits = PackageLimits()) -> Api:
    upgrade(url)
    store = Store(session_factory(make_engine(url)), Published())
    packages = Packages(store.sessions, limits, package_checker())
    app = create_app(store, Callers(), jobs=Jobs(store), packages=packages)
    return Api(TestClient(app, raise_server_exceptions=False), store, Published())


@pytest.fixture
def api(tmp_path) -> Api:
    return packages_api(f"sqlite:///{tmp_path / 'packages.sqlite'}")


def upload(api: Api, data: bytes, headers: dict | None = None, query: str = ""):
    return api.client.post(f"/packages{query}", content=data,
                           headers={**ZIP_TYPE, **(headers or {})})


def uploaded(api: Api, data: bytes, headers: dict | None = None, query: str = "") -> dict:
    answer = upload(api, data, headers, query)
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_upload_show_and_download_round_trip(api):
    data = zip_of(package_files())
    package = uploaded(api, data)
    assert {k: package[k] for k in ("name", "version", "description", "public", "tenant_id",
                                    "size", "content_type", "uploaded_by")} == {
        "name": "hello", "version": "1.0.0", "description": "says hello", "public": False,
        "tenant_id": "t1", "size": len(data), "content_type": "application/zip",
        "uploaded_by": "u1"}
    assert package["digest"] == hashlib.sha256(data).hexdigest()
    shown = api.client.get(f"/packages/{package['id']}").json()
    assert shown["manifest"] == {"name": "hello", "version": "1.0.0",
                                 "description": "says hello"}
    assert shown["files"] == sorted(package_files())
    got = api.client.get(f"/v1/packages/{package['id']}/download")
    assert got.status_code == 200
    assert got.content == data and hashlib.sha256(got.content).hexdigest() == package["digest"]
    assert got.headers["content-type"] == "application/zip"
    assert got.headers["content-disposition"] == 'attachment; filename="hello-1.0.0.zip"'


def test_a_tar_gz_downloads_as_one(api):
    data = tar_of(package_files(version="2.0"))
    package = uploaded(api, data, {"Content-Type": "application/gzip"})
    got = api.client.get(f"/packages/{package['id']}/download")
    assert got.content == data
    assert got.headers["content-disposition"].endswith('filename="hello-2.0.tar.gz"')


def test_a_package_with_workflow_problems_is_refused_with_each_file_and_line(api):
    workflow = ("<workflow>\n  <rule match=\"$\">\n    <frobnicate/>\n"
                "    <send-command template=\"Nope\" service=\"s\" unit=\"u\"/>\n"
                "  </rule>\n</workflow>\n")
    files = {**package_files(workflow=workflow), "workflows/broken.xml": b"<workflow>\n<rule>"}
    answer = upload(api, zip_of(files))
    assert answer.status_code == 400, answer.text
    problems = answer.json()["error"]["problems"]
    assert "workflows/hello.xml:3: unknown function <frobnicate>" in problems
    assert any(p.startswith("workflows/hello.xml:4: template 'Nope': ") for p in problems)
    assert any(p.startswith("workflows/broken.xml:") and "XML syntax error" in p
               for p in problems)
    assert len(problems) == 3
    assert answer.json()["error"]["message"].startswith("the package is refused: ")
    assert api.client.get("/packages").json() == {"packages": []}


def test_the_data_folders_templates_and_scripts_serve_a_package(api):
    """A package's workflow may name the data folder's Heat template, agent
    template and script (the package's own come first), as its jobs find them;
    a template neither has is refused."""
    workflow = ('<workflow>\n<rule match="$">\n'
                '<update-cf-stack template="LinuxInstance"/>\n'
                '<send-command template="Linux/DeployStaticSite" service="s" unit="u"/>\n'
                '<send-command template="Hello" service="s" unit="u"/>\n'
                '</rule>\n</workflow>\n')
    files = {**package_files(workflow=workflow),
             "templates/agent/Hello.template": json.dumps(
                 {"Scripts": ["deploy_static_site.py"], "Commands": []}).encode(),
             "types.json": json.dumps({"types": {"linuxHello": {
                 "extends": "linuxService", "instance": {"template": "LinuxInstance"}}}}).encode()}
    assert uploaded(api, zip_of(files))["name"] == "hello"
    workflow = workflow.replace('"LinuxInstance"', '"NoSuchInstance"')
    problems = upload(api, zip_of(package_files("other", workflow=workflow))).json()[
        "error"]["problems"]
    assert problems == ["workflows/hello.xml:3: template 'NoSuchInstance': "
                        "templates/cf/NoSuchInstance.template: "
                        "Heat template 'NoSuchInstance' not found"]


def test_every_problem_of_a_package_is_reported_at_once(api):
    """Template missing, every missing script of a plan, bad XML, bad types (each
    of them), a type's missing instance template: one answer, each naming its
    file and what."""
    workflow = ('<workflow>\n<rule match="$">\n'
                '<update-cf-stack template="Nope"/>\n'
                '<send-command template="Hello" service="s" unit="u"/>\n'
                '</rule>\n</workflow>\n')
    types = ('{"types": {\n'
             ' "a": {"extends": "nowhere"},\n'
             ' "b": {"colour": 1},\n'
             ' "c": {"extends": "a"},\n'
             ' "d": {"extends": "linuxService", "instance": {"image": ""}}\n'
             '}}\n')
    files = {**package_files(workflow=workflow),
             "templates/agent/Hello.template": json.dumps(
                 {"Scripts": ["one.sh", "two.sh"], "Commands": []}).encode(),
             "workflows/broken.xml": b"<workflow>\n<rule>", "types.json": types.encode()}
    problems = upload(api, zip_of(files)).json()["error"]["problems"]
    assert problems[0].startswith("workflows/broken.xml:2: XML syntax error: "), problems
    assert problems[1:] == [
        "workflows/hello.xml:3: template 'Nope': templates/cf/Nope.template: "
        "Heat template 'Nope' not found",
        "workflows/hello.xml:4: template 'Hello': templates/agent/scripts/one.sh: "
        "script 'one.sh': No such file or directory",
        "workflows/hello.xml:4: template 'Hello': templates/agent/scripts/two.sh: "
        "script 'two.sh': No such file or directory",
        "types.json:3: type 'b': unknown key(s) colour",
        "types.json:5: type 'd': 'instance' 'image' must be a non-empty string",
        "types.json:2: type 'a' extends unknown type 'nowhere'",
    ], problems
    missing = {"types.json": json.dumps({"types": {"e": {
        "extends": "linuxService", "instance": {"template": "Gone"}}}}, indent=1).encode()}
    problems = upload(api, zip_of({**package_files(), **missing})).json()["error"]["problems"]
    assert problems == ["types.json:6: type 'e': instance template 'Gone': "
                        "templates/cf/Gone.template: Heat template 'Gone' not found"]


def test_unsafe_archives_and_bad_manifests_are_400s_naming_the_member(api):
    evil = upload(api, zip_of({**package_files(), "../evil": b"x"}))
    assert evil.status_code == 400
    assert evil.json()["error"]["problems"] == ["../evil: '..' is not allowed in a package's paths"]
    files = package_files(workflow="<workflow>\n<frobnicate/>\n</workflow>\n")
    files["package.json"] = b'{"name": "hello",\n "version": }'
    bad = upload(api, zip_of(files)).json()["error"]
    assert bad["problems"][0].startswith("package.json:2: invalid JSON: ")
    assert bad["problems"][1:] == ["workflows/hello.xml:2: unknown function <frobnicate>"]
    assert upload(api, b"not an archive").status_code == 400
    broken_types = upload(api, zip_of({**package_files(), "types.json": b"[]"}))
    assert broken_types.status_code == 400
    assert broken_types.json()["error"]["problems"][0].startswith("types.json: ")


def test_the_size_limit_is_a_413_and_the_others_400s(tmp_path):
    api = packages_api(f"sqlite:///{tmp_path / 'small.sqlite'}",
                       PackageLimits(max_bytes=2048, max_files=3))
    assert upload(api, bytes(4096)).status_code == 413
    assert "max_package_files" in upload(api, zip_of(package_files())).json()["error"]["message"]
    # other bodies keep the API's own limit
    assert api.client.post("/environments", json={"name": "x" * 2_000_000}).status_code == 413


def test_a_version_is_immutable(api):
    uploaded(api, zip_of(package_files()))
    again = upload(api, tar_of(package_files()))
    assert again.status_code == 409
    assert again.json()["error"]["message"] == (
        "version 1.0.0 of package hello exists already: versions are immutable, upload it "
        "with another version")
    # whoever owns the first
    assert upload(api, zip_of(package_files()), api.as_tenant("t2")).status_code == 409
    assert uploaded(api, zip_of(package_files(version="1.0.1")))["version"] == "1.0.1"


def test_projects_see_their_own_and_the_public_packages(api):
    mine = uploaded(api, zip_of(package_files("mine")))
    theirs = uploaded(api, zip_of(package_files("theirs")), api.as_tenant("t2", "u2"))
    refused = upload(api, zip_of(package_files("shared")), query="?public=true")
    assert refused.status_code == 403
    assert refused.json()["error"]["message"] == "only the cloud admin uploads public packages"
    shared = uploaded(api, zip_of(package_files("shared")), {"X-Auth-Token": "admin"},
                      "?public=true")
    assert (shared["public"], shared["tenant_id"]) == (True, None)

    def names(headers=None):
        return [p["name"] for p in api.client.get("/packages", headers=headers).json()["packages"]]
    assert names() == ["mine", "shared"]
    assert names(api.as_tenant("t2")) == ["shared", "theirs"]
    assert api.client.get(f"/packages/{theirs['id']}").status_code == 404
    assert api.client.get(f"/packages/{theirs['id']}/download").status_code == 404
    assert api.client.get(f"/packages/{shared['id']}/download").status_code == 200
    assert api.client.get(f"/packages/{mine['id']}",
                          headers=api.as_tenant("t2")).status_code == 404
    assert api.client.get(f"/packages/{theirs['id']}",
                          headers={"X-Auth-Token": "admin"}).status_code == 200


def test_delete_by_the_owner_or_the_cloud_admin(api):
    mine = uploaded(api, zip_of(package_files("mine")))
    shared = uploaded(api, zip_of(package_files("shared")), {"X-Auth-Token": "admin"},
                      "?public=true")
    theirs = uploaded(api, zip_of(package_files("theirs")), api.as_tenant("t2"))
    assert api.client.delete(f"/packages/{theirs['id']}").status_code == 404
    public = api.client.delete(f"/packages/{shared['id']}")
    assert public.status_code == 403
    assert "only the cloud admin deletes it" in public.json()["error"]["message"]
    assert api.client.delete(f"/packages/{mine['id']}").status_code == 204
    assert api.client.get(f"/packages/{mine['id']}").status_code == 404
    assert api.client.delete(f"/packages/{mine['id']}").status_code == 404
    for package in (shared, theirs):
        assert api.client.delete(f"/packages/{package['id']}",
                                 headers={"X-Auth-Token": "admin"}).status_code == 204
    assert api.client.get("/packages", headers={"X-Auth-Token": "admin"}).json() == {
        "packages": []}
    # a deleted version may be uploaded again
    assert upload(api, zip_of(package_files("mine"))).status_code == 201


def test_a_package_in_use_is_not_deleted(api):
    package = uploaded(api, zip_of(package_files()))
    env = api.client.post("/environments", json={"name": "web"}).json()
    assert api.client.put(f"/environments/{env['id']}/packages/hello",
                          json={}).status_code == 200
    answer = api.client.delete(f"/packages/{package['id']}")
    assert answer.status_code == 409
    error = answer.json()["error"]
    assert error["message"] == ("package hello 1.0.0 is used by environments web: it is "
                                "deleted when unused")
    assert error["environments"] == [{"id": env["id"], "name": "web"}]
    assert api.client.get(f"/packages/{package['id']}").json()["used_by"] == [
        {"id": env["id"], "name": "web"}]


def test_a_public_package_names_only_ones_own_environments(api):
    admin = {"X-Auth-Token": "admin"}
    package = uploaded(api, zip_of(package_files("shared")), admin, "?public=true")
    theirs = api.client.post("/environments", json={"name": "secret-project-env"},
                             headers=api.as_tenant("t2")).json()
    api.client.put(f"/environments/{theirs['id']}/packages/shared", json={},
                   headers=api.as_tenant("t2"))
    shown = api.client.get(f"/packages/{package['id']}").json()
    assert shown["used_by"] == [] and shown["used_elsewhere"] == 1
    assert "secret-project-env" in api.client.get(f"/packages/{package['id']}",
                                                  headers=admin).text
    refused = api.client.delete(f"/packages/{package['id']}", headers=admin)
    assert refused.status_code == 409 and "secret-project-env" in refused.text


def test_without_a_checker_uploads_are_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'nocheck.sqlite'}"
    upgrade(url)
    store = Store(session_factory(make_engine(url)), Published())
    client = TestClient(create_app(store, NoAuth("t1", "u1")), raise_server_exceptions=False)
    answer = client.post("/packages", content=zip_of(package_files()), headers=ZIP_TYPE)
    assert answer.status_code == 503
    assert client.get("/packages").json() == {"packages": []}


def test_a_reader_may_list_but_not_upload(api):
    reader = replace(ADMIN, tenant_id="t1", project_name="demo", roles=frozenset({"reader"}))
    api.client.app.state.auth.context = lambda headers: reader
    assert api.client.get("/packages").status_code == 200
    answer = upload(api, zip_of(package_files()))
    assert answer.status_code == 403
    assert answer.json()["error"]["message"].startswith("package:upload is not allowed")


def test_on_postgresql():
    url = postgres_url()
    reset_postgres(url)
    try:
        api = packages_api(url)
        data = tar_of(package_files())
        package = uploaded(api, data)
        assert api.client.get(f"/packages/{package['id']}/download").content == data
        assert upload(api, zip_of(package_files())).status_code == 409
        listed = api.client.get("/packages").json()["packages"]
        assert [p["digest"] for p in listed] == [hashlib.sha256(data).hexdigest()]
        assert json.loads(json.dumps(listed))[0]["size"] == len(data)
        assert api.client.get("/packages/a%00b").status_code == 404     # no NUL reaches it
        assert api.client.delete(f"/packages/{package['id']}").status_code == 204
    finally:
        reset_postgres(url)


def test_only_package_uploads_take_an_archive_and_never_a_form(api):
    data = zip_of(package_files())
    form = api.client.post("/packages", content=data, headers={"Content-Type": "text/plain"})
    assert form.status_code == 415
    elsewhere = api.client.post("/environments", content=data, headers=ZIP_TYPE)
    assert elsewhere.status_code == 415
    foreign = api.client.post("/packages", content=data,
                              headers={**ZIP_TYPE, "Origin": "https://evil.example"})
    assert foreign.status_code == 403


def test_the_migration_goes_down_and_up(tmp_path):
    from alembic import command
    from sqlalchemy import inspect

    from fornace.common.db.engine import alembic_config

    url = f"sqlite:///{tmp_path / 'migrate.sqlite'}"
    upgrade(url)
    assert "packages" in inspect(make_engine(url)).get_table_names()
    command.downgrade(alembic_config(url), "0007")
    assert "packages" not in inspect(make_engine(url)).get_table_names()
    command.upgrade(alembic_config(url), "head")
    assert "packages" in inspect(make_engine(url)).get_table_names()


def test_the_openapi_schema_describes_the_archive_body(api):
    schema = api.client.get("/openapi.json").json()
    body = schema["paths"]["/packages"]["post"]["requestBody"]["content"]
    assert body["application/zip"]["schema"] == {"type": "string", "format": "binary"}
