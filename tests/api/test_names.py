"""Names are unique: an environment's within its tenant, a service's within its
environment (in the session's view); and a list of services is added all or
nothing, its errors naming the entry and the field."""
from __future__ import annotations

import copy
import threading
from typing import Any

import pytest
from sqlalchemy import select

from apikit import Api, make_api, reset_postgres, web_server
from fornace.common.db.models import ConfigSession, Environment, utcnow
from serving import serving
from services import import_or_require, postgres_url

SESSION = "X-Configuration-Session"


@pytest.fixture
def api(tmp_path) -> Api:
    return make_api(f"sqlite:///{tmp_path / 'names.sqlite'}")


@pytest.fixture
def pg_api():
    url = postgres_url()
    reset_postgres(url)
    yield make_api(url)
    reset_postgres(url)


def create(api: Api, name: str, headers: dict[str, str] | None = None) -> Any:
    return api.client.post("/environments", json={"name": name}, headers=headers or {})


def created(api: Api, name: str) -> dict[str, Any]:
    response = create(api, name)
    assert response.status_code == 200, response.text
    return response.json()


def error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    return response.json()["error"]


def session_of(api: Api, env_id: str) -> str:
    return api.client.post(f"/environments/{env_id}/configure").json()["id"]


def services_of(api: Api, env_id: str, session: str) -> list[dict[str, Any]]:
    return api.client.get(f"/environments/{env_id}/services", headers={SESSION: session}).json()


def post(api: Api, env_id: str, session: str, body: Any, path: str = "") -> Any:
    return api.client.post(f"/environments/{env_id}/services{path}", json=body,
                           headers={SESSION: session})


def put(api: Api, env_id: str, session: str, body: Any, path: str = "") -> Any:
    return api.client.put(f"/environments/{env_id}/services{path}", json=body,
                          headers={SESSION: session})


# -- environments -------------------------------------------------------------------------

def test_a_second_environment_of_a_name_is_409_naming_the_first(api):
    first = created(api, "web")
    refused = error(create(api, "web"), 409)
    assert refused["message"] == f"an environment named 'web' exists already (id {first['id']})"
    assert refused["existing"] == {"id": first["id"], "name": "web"}
    assert error(create(api, "  web "), 409)["existing"]["id"] == first["id"]  # names are stripped
    listed = api.client.get("/environments").json()["environments"]
    assert [e["id"] for e in listed] == [first["id"]]
    assert created(api, "Web")["name"] == "Web"      # another name: case counts


def test_names_are_unique_per_tenant_only(api):
    mine = created(api, "web")
    theirs = create(api, "web", api.as_tenant("t2", "u2"))
    assert theirs.status_code == 200 and theirs.json()["id"] != mine["id"]


def test_renaming_to_a_taken_name_is_409_and_frees_the_old_name_when_done(api):
    web, db = created(api, "web"), created(api, "db")
    refused = error(api.client.put(f"/environments/{db['id']}", json={"name": "web"}), 409)
    assert refused["message"] == f"an environment named 'web' exists already (id {web['id']})"
    assert api.client.get(f"/environments/{db['id']}").json()["name"] == "db"
    assert api.client.put(f"/environments/{db['id']}", json={"name": "db"}).status_code == 200
    assert api.client.put(f"/environments/{db['id']}", json={"name": "sql"}).status_code == 200
    assert created(api, "db")["name"] == "db"


def test_duplicates_an_older_database_holds_are_left_usable(api):
    """No constraint refuses what is stored already: only new names are checked."""
    first = created(api, "legacy")
    with api.store.sessions.begin() as db:
        db.add(Environment(id="old-twin", name="legacy", tenant_id="t1", version=0,
                           state="ready", created=utcnow(), updated=utcnow(),
                           description={"id": "old-twin", "name": "legacy", "services": []}))
    assert api.client.put("/environments/old-twin", json={"name": "legacy"}).status_code == 200
    assert error(create(api, "legacy"), 409)["existing"]["id"] == first["id"]
    assert api.client.put("/environments/old-twin", json={"name": "twin"}).status_code == 200
    with api.store.sessions() as db:
        assert sorted(db.scalars(select(Environment.name))) == ["legacy", "twin"]


def test_muranoclient_gets_a_conflict_for_a_taken_name(api):
    mc_client = import_or_require("muranoclient.v1.client")
    mc_exc = import_or_require("muranoclient.common.exceptions")
    with serving(api.client.app) as url:
        client = mc_client.Client(url, token="tok-1")
        client.environments.create({"name": "mc"})
        with pytest.raises(mc_exc.HTTPConflict, match="an environment named 'mc' exists already"):
            client.environments.create({"name": "mc"})
        other = client.environments.create({"name": "mc2"})
        with pytest.raises(mc_exc.HTTPConflict, match="an environment named 'mc' exists already"):
            client.environments.update(other.id, "mc")


# -- services -------------------------------------------------------------------------------

def test_a_service_name_taken_in_the_session_is_409_naming_the_service(api):
    env = created(api, "web")
    session = session_of(api, env["id"])
    first = post(api, env["id"], session, web_server("frontend")).json()
    refused = error(post(api, env["id"], session, web_server("frontend")), 409)
    assert refused["message"] == (f"a service named 'frontend' (id {first['id']}) exists "
                                  f"already in this environment")
    assert refused["existing"] == {"id": first["id"], "name": "frontend"}
    assert [s["id"] for s in services_of(api, env["id"], session)] == [first["id"]]


def test_renaming_a_service_to_a_taken_name_is_409(api):
    env = created(api, "web")
    session = session_of(api, env["id"])
    front = post(api, env["id"], session, web_server("frontend")).json()
    back = post(api, env["id"], session, web_server("backend")).json()
    by_field = put(api, env["id"], session, "frontend", f"/{back['id']}/name")
    assert error(by_field, 409)["existing"]["id"] == front["id"]
    whole = {**back, "name": "frontend"}
    assert error(put(api, env["id"], session, whole, f"/{back['id']}"), 409)["existing"] == \
        {"id": front["id"], "name": "frontend"}
    assert [s["name"] for s in services_of(api, env["id"], session)] == ["frontend", "backend"]
    # its own name again, or a free one: fine; and a swap in one PUT of the list
    assert put(api, env["id"], session, "backend", f"/{back['id']}/name").status_code == 200
    swapped = [{**front, "name": "backend"}, {**back, "name": "frontend"}]
    assert put(api, env["id"], session, swapped).status_code == 200
    assert [s["name"] for s in services_of(api, env["id"], session)] == ["backend", "frontend"]


def test_a_whole_list_put_with_one_name_twice_is_400_naming_both(api):
    env = created(api, "web")
    session = session_of(api, env["id"])
    front = post(api, env["id"], session, web_server("frontend")).json()
    twice = [front, {**web_server("a")}, {**web_server("a")}]
    assert error(put(api, env["id"], session, twice), 400)["message"] == \
        "services[2].name: duplicate name 'a' (also services[1])"
    assert [s["name"] for s in services_of(api, env["id"], session)] == ["frontend"]


def test_services_sharing_a_name_from_before_can_still_be_edited(api):
    """A session stored before names were checked may hold two services of one
    name: editing them (or others) goes on; only a new clash is refused."""
    env = created(api, "web")
    session = session_of(api, env["id"])
    front = post(api, env["id"], session, web_server("frontend")).json()
    back = post(api, env["id"], session, web_server("backend")).json()
    with api.store.sessions.begin() as db:
        stored = db.get(ConfigSession, session)
        description = copy.deepcopy(stored.description)
        description["services"][1]["name"] = "frontend"
        stored.description = description
    assert put(api, env["id"], session, "new.acme.loc", f"/{back['id']}/domain"
               ).status_code == 200
    assert put(api, env["id"], session, services_of(api, env["id"], session)).status_code \
        == 200
    late = error(post(api, env["id"], session, web_server("frontend")), 409)
    assert late["existing"]["id"] == front["id"]
    assert put(api, env["id"], session, "backend", f"/{back['id']}/name").status_code == 200


def test_a_removed_service_frees_its_name_and_sessions_are_separate_views(api):
    env = created(api, "web")
    session, other = session_of(api, env["id"]), session_of(api, env["id"])
    first = post(api, env["id"], session, web_server("frontend")).json()
    assert post(api, env["id"], other, web_server("frontend")).status_code == 200
    assert api.client.delete(f"/environments/{env['id']}/services/{first['id']}",
                             headers={SESSION: session}).status_code == 200
    assert post(api, env["id"], session, web_server("frontend")).status_code == 200


# -- a list of services: all or nothing ----------------------------------------------------

def directory(master: Any = True) -> dict[str, Any]:
    return {"name": "ad", "type": "activeDirectory", "domain": "acme.loc",
            "adminPassword": "P@ssw0rd-ad", "units": [{"isMaster": master,
                                                       "recoveryPassword": "R3cover!"}]}


def test_a_list_of_services_is_added_at_once(api):
    env = created(api, "web")
    session = session_of(api, env["id"])
    added = post(api, env["id"], session, [web_server("frontend"), directory()])
    assert added.status_code == 200, added.text
    assert [s["name"] for s in added.json()] == ["frontend", "ad"]
    assert added.json()[1]["adminPassword"] == "***"
    assert [s["name"] for s in services_of(api, env["id"], session)] == ["frontend", "ad"]


@pytest.mark.parametrize("entries, message", [
    ([web_server("frontend"), directory(master="yes")],
     "services[1].units[0].isMaster: must be a boolean, not a string"),
    ([web_server("frontend"), {**web_server("x"), "type": "teapot"}],
     "services[1].type: unknown service type 'teapot'"),
    ([web_server("frontend"), {**web_server("x"), "adminPasword": "typo"}],
     "services[1].adminPasword: unknown field"),
    ([web_server("frontend"), 7], "services[1]: must be a JSON object, not an integer"),
    ([web_server("a"), web_server("b"), web_server("a")],
     "services[2].name: duplicate name 'a' (also services[0])"),
    ([{**web_server("a"), "id": "same"}, {**web_server("b"), "id": "same"}],
     "services[1].id: id 'same' is already used in this environment"),
    ([], "services: the list is empty"),
])
def test_a_list_with_a_wrong_entry_adds_nothing_and_names_entry_and_field(api, entries,
                                                                          message):
    env = created(api, "web")
    session = session_of(api, env["id"])
    kept = post(api, env["id"], session, web_server("kept")).json()
    refused = error(post(api, env["id"], session, entries), 400)
    assert refused["message"].startswith(message), refused["message"]
    assert [s["id"] for s in services_of(api, env["id"], session)] == [kept["id"]]


def test_a_list_clashing_with_a_service_of_the_session_adds_nothing(api):
    env = created(api, "web")
    session = session_of(api, env["id"])
    kept = post(api, env["id"], session, web_server("kept")).json()
    refused = error(post(api, env["id"], session, [web_server("new"), web_server("kept")]),
                    409)
    assert refused["existing"] == {"id": kept["id"], "name": "kept"}
    too_many = [web_server("new"), web_server("big", units=[{}] * 101)]
    assert "[api] max_units_per_service" in error(post(api, env["id"], session, too_many),
                                                  400)["message"]
    assert [s["id"] for s in services_of(api, env["id"], session)] == [kept["id"]]


# -- concurrency: the check and the write are one step ---------------------------------------

def at_once(count: int, send: Any) -> list[Any]:
    """``send()`` from ``count`` threads released together; the responses."""
    barrier = threading.Barrier(count)
    responses: list[Any] = []

    def run() -> None:
        barrier.wait()
        responses.append(send())

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return responses


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_concurrent_creates_of_one_name_make_one_environment(backend, request):
    api = request.getfixturevalue("api" if backend == "sqlite" else "pg_api")
    for attempt in range(3):
        name = f"race{attempt}"
        codes = sorted(r.status_code for r in at_once(4, lambda: create(api, name)))
        assert codes == [200, 409, 409, 409], codes
    names = [e["name"] for e in api.client.get("/environments").json()["environments"]]
    assert sorted(names) == ["race0", "race1", "race2"]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_concurrent_adds_to_one_session_lose_nothing_and_share_no_name(backend, request):
    api = request.getfixturevalue("api" if backend == "sqlite" else "pg_api")
    env = created(api, "web")
    session = session_of(api, env["id"])
    same = at_once(4, lambda: post(api, env["id"], session, web_server("same")))
    assert sorted(r.status_code for r in same) == [200, 409, 409, 409]
    names = iter(f"s{n}" for n in range(4))
    lock = threading.Lock()

    def add_another() -> Any:
        with lock:
            name = next(names)
        return post(api, env["id"], session, web_server(name))

    assert [r.status_code for r in at_once(4, add_another)] == [200] * 4
    assert sorted(s["name"] for s in services_of(api, env["id"], session)) == \
        ["s0", "s1", "s2", "s3", "same"]
