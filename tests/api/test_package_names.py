"""Package names owned by projects: the project that first uploads a name is the
only one to add versions of it; every other project is refused with one
answer that tells nothing of the name's versions (public, private, none left);
the cloud admin transfers a name; the migration gives existing names to the
project of their oldest version; and two projects uploading one new name at
once on PostgreSQL leave exactly one owner."""
from __future__ import annotations

import datetime
import html
import json
import os
import threading

import pytest
from sqlalchemy import event, insert, select, text

from apikit import Published, reset_postgres
from packagekit import package_files, zip_of
from serving import serving
from services import postgres_url
from test_dashboard_packages import Chosen, packages_app, post_upload, user
from test_packages_api import packages_api, upload, uploaded
from waiting import wait_for
from fornace.api.context import Context
from fornace.cli.main import main
from fornace.api.errors import ApiError
from fornace.api.packages.store import Packages
from fornace.common.db.engine import alembic_config, make_engine, session_factory
from fornace.common.db.models import Package
from fornace.conductor.packages.check import package_checker

ADMIN_TOKEN = {"X-Auth-Token": "admin"}
OWNERS = text("SELECT name, tenant_id FROM package_names ORDER BY name")


@pytest.fixture
def api(tmp_path):
    return packages_api(f"sqlite:///{tmp_path / 'names.sqlite'}")


def archive(name: str, version: str) -> bytes:
    return zip_of(package_files(name, version))


def refusal(api, name: str, version: str, headers: dict) -> dict:
    answer = upload(api, archive(name, version), headers)
    assert answer.status_code == 409, answer.text
    return answer.json()


def transfer(api, name: str, body, headers: dict | None = None):
    return api.client.put(f"/v1/packages/names/{name}", content=json.dumps(body),
                          headers={"Content-Type": "application/json", **(headers or {})})


def test_only_the_first_project_adds_versions_and_others_are_refused_alike(api):
    t2 = api.as_tenant("t2", "u2")
    mine = uploaded(api, archive("mine", "1.0.0"))                   # t1's, private
    uploaded(api, archive("shared", "1.0.0"), ADMIN_TOKEN, "?public=true")

    # another project may not take the next version of t1's name
    taken = refusal(api, "mine", "2.0.0", t2)
    assert taken["error"]["message"] == "package name 'mine' is not available to this project"
    # nor learn that a private version exists: the same answer for the existing one ...
    assert refusal(api, "mine", "1.0.0", t2) == taken
    # ... and for a public name, whose versions everyone sees
    assert json.dumps(refusal(api, "shared", "2.0.0", t2)).replace("shared", "mine") == \
        json.dumps(taken)
    assert [p["name"] for p in api.client.get("/packages", headers=t2).json()["packages"]] \
        == ["shared"]

    # the name stays t1's when its versions are gone
    assert api.client.delete(f"/packages/{mine['id']}").status_code == 204
    assert refusal(api, "mine", "1.0.0", t2) == taken
    assert uploaded(api, archive("mine", "2.0.0"))["tenant_id"] == "t1"
    # a public name is the cloud admin's: only they add versions, private ones too
    assert refusal(api, "shared", "2.0.0", {}) == refusal(api, "shared", "2.0.0", t2)
    assert uploaded(api, archive("shared", "2.0.0"), ADMIN_TOKEN)["tenant_id"] == "p-admin"
    # a new name is anyone's first
    assert uploaded(api, archive("theirs", "1.0.0"), t2)["tenant_id"] == "t2"


def test_the_cloud_admin_transfers_a_name_to_another_project(api):
    t2 = api.as_tenant("t2", "u2")
    first = uploaded(api, archive("hello", "1.0.0"))
    refused = transfer(api, "hello", {"project_id": "t1"}, t2)
    assert refused.status_code == 403
    assert refused.json()["error"]["message"].startswith("package:transfer is not allowed")

    moved = transfer(api, "hello", {"project_id": "t2"}, ADMIN_TOKEN)
    assert moved.status_code == 200, moved.text
    assert {k: moved.json()[k] for k in ("name", "project_id", "previous_project_id")} == {
        "name": "hello", "project_id": "t2", "previous_project_id": "t1"}
    assert uploaded(api, archive("hello", "2.0.0"), t2)["tenant_id"] == "t2"
    assert refusal(api, "hello", "3.0.0", {})["error"]["message"] == (
        "package name 'hello' is not available to this project")
    # the versions uploaded stay their project's
    assert api.client.get(f"/packages/{first['id']}").status_code == 200
    assert api.client.get(f"/packages/{first['id']}", headers=t2).status_code == 404

    # the admin, who sees every package, is told whose a name is
    told = refusal(api, "hello", "3.0.0", ADMIN_TOKEN)["error"]
    assert told["message"].startswith("package name 'hello' belongs to project t2: transfer")
    back = transfer(api, "hello", {"project_id": None}, ADMIN_TOKEN).json()
    assert (back["project_id"], back["previous_project_id"]) == (None, "t2")
    assert refusal(api, "hello", "3.0.0", t2)["error"]["message"].startswith(
        "package name 'hello' is not available")
    assert uploaded(api, archive("hello", "3.0.0"), ADMIN_TOKEN, "?public=true")["public"]


def test_the_dashboard_s_upload_form_refuses_another_project_s_name_alike(tmp_path):
    api = packages_app(f"sqlite:///{tmp_path / 'dash.sqlite'}", Chosen())
    mia, bea = user(api, "mia"), user(api, "bea")
    assert post_upload(mia, archive("hello", "1.0.0")).status_code == 303
    refused = post_upload(bea, archive("hello", "2.0.0"))
    assert refused.status_code == 409
    page = html.unescape(refused.text)
    assert "package name 'hello' is not available to this project" in page
    assert "1.0.0" not in page and "p-a" not in page
    assert "hello" not in html.unescape(bea.get("/packages"))


def test_the_cli_transfers_a_name_for_the_cloud_admin(api, tmp_path, capsys, monkeypatch):
    """``fornace package transfer``, against the API on a real port."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for variable in [v for v in os.environ if v.startswith(("OS_", "FORNACE_URL"))]:
        monkeypatch.delenv(variable)
    uploaded(api, archive("hello", "1.0.0"))                      # project t1's
    with serving(api.client.app) as url:
        def fornace(*args: str) -> int:
            return main(["package", "transfer", *args, "--url", url])
        assert fornace("hello", "t2", "--tenant", "t1") != 0
        assert "package:transfer is not allowed" in capsys.readouterr().err
        assert fornace("hello", "t2", "--token", "admin") == 0
        assert capsys.readouterr().out == (
            "package name hello now belongs to project t2 (before: project t1)\n")
        assert fornace("hello", "--cloud", "--token", "admin", "--json") == 0
        moved = json.loads(capsys.readouterr().out)
        assert (moved["project_id"], moved["previous_project_id"]) == (None, "t2")
        assert fornace("nobody", "t2", "--token", "admin") != 0
        assert "no package name 'nobody'" in capsys.readouterr().err


@pytest.mark.parametrize("body, status", [
    ({"project_id": "t2"}, 404), ([1], 400), ({}, 400), ({"project_id": 3}, 400),
    ({"project_id": ""}, 400), ({"project_id": "x" * 65}, 400),
    ({"project_id": "t2", "more": 1}, 400)])
def test_a_transfer_names_a_known_name_and_a_project(api, body, status):
    answer = transfer(api, "nobody-uploaded", body, ADMIN_TOKEN)
    assert answer.status_code == status, answer.text
    message = answer.json()["error"]["message"]
    assert "project_id" in message if status == 400 else message == (
        "no package name 'nobody-uploaded': none was uploaded")


def test_the_migration_gives_each_name_to_the_project_of_its_oldest_version(tmp_path):
    from alembic import command

    url = f"sqlite:///{tmp_path / 'migrate.sqlite'}"
    command.upgrade(alembic_config(url), "0009")
    engine = make_engine(url)
    day = datetime.datetime(2024, 5, 1)

    def row(name: str, version: str, tenant: str | None, days: int) -> dict:
        return {"id": f"{name}-{version}", "name": name, "version": version,
                "description": "", "tenant_id": tenant, "public": tenant is None,
                "content_type": "application/zip", "digest": "0" * 64, "size": 1,
                "files": [], "data": b"x", "uploaded_by": "u",
                "created": day + datetime.timedelta(days=days)}
    with engine.begin() as db:
        db.execute(insert(Package.__table__).values([
            row("squatted", "2.0.0", "t2", 3), row("squatted", "1.0.0", "t1", 1),
            row("shared", "1.0.0", None, 0), row("shared", "2.0.0", "t3", 5),
            row("solo", "1.0.0", "t3", 2)]))
    command.upgrade(alembic_config(url), "head")
    with engine.connect() as db:
        owners = dict(db.execute(OWNERS).all())
    assert owners == {"squatted": "t1", "shared": None, "solo": "t3"}
    command.downgrade(alembic_config(url), "0009")
    with engine.connect() as db:
        assert db.scalar(text("SELECT count(*) FROM packages")) == 5
    command.upgrade(alembic_config(url), "head")


# -- two projects, one new name, at once (PostgreSQL) ------------------------------------------

def _waiting_on_a_lock(engine) -> bool:
    """Whether another session of this database waits for a row lock."""
    with engine.connect() as db:
        return bool(db.scalar(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()")))


def _race(engine, first: Context, second: Context, name: str) -> list:
    """``first`` uploads ``name`` 1.0.0 and stops inside its transaction, once
    it has written a row; ``second`` uploads ``name`` 2.0.0 and either ends or
    waits for ``first``'s row; then ``first`` commits.  Each one's outcome: the
    package's view or the ApiError."""
    stopped, go = threading.Event(), threading.Event()
    held = session_factory(engine)

    @event.listens_for(held, "after_flush")
    def stop(session, context) -> None:
        if not stopped.is_set():
            stopped.set()
            go.wait(90)
    outcomes: dict[str, object] = {}

    def run(label: str, sessions, ctx: Context, version: str) -> None:
        packages = Packages(sessions, check=package_checker())
        try:
            outcomes[label] = packages.upload(ctx, archive(name, version))
        except ApiError as exc:
            outcomes[label] = exc
    one = threading.Thread(target=run, args=("first", held, first, "1.0.0"))
    one.start()
    wait_for(stopped.is_set, "the first upload to write its row")
    two = threading.Thread(target=run, args=("second", session_factory(engine), second,
                                             "2.0.0"))
    two.start()
    wait_for(lambda: "second" in outcomes or _waiting_on_a_lock(engine),
             "the second upload to end or wait for the first")
    go.set()
    one.join(90)
    two.join(90)
    return [outcomes["first"], outcomes["second"]]


def test_two_projects_uploading_one_new_name_at_once_leave_one_owner():
    url = postgres_url()
    reset_postgres(url)
    try:
        packages_api(url)          # the schema
        engine = make_engine(url)
        t1 = Context("t1", "u1", roles=frozenset({"member"}))
        t2 = Context("t2", "u2", roles=frozenset({"member"}))
        won, lost = _race(engine, t1, t2, "contested")
        assert isinstance(won, dict) and won["tenant_id"] == "t1", won
        assert isinstance(lost, ApiError) and lost.status == 409, lost
        assert lost.message == "package name 'contested' is not available to this project"
        with engine.connect() as db:
            assert db.execute(select(Package.name, Package.tenant_id)).all() == [
                ("contested", "t1")]
            assert db.execute(OWNERS).all() == [
                ("contested", "t1")]
        # one project's two uploads of a new name at once are both stored
        both = _race(engine, t2, t2, "together")
        assert [o["version"] for o in both if isinstance(o, dict)] == ["1.0.0", "2.0.0"], both
        engine.dispose()
    finally:
        reset_postgres(url)
