"""An environment's catalog remembered by the digests of its pinned versions
(:meth:`fornace.api.stores.store.Store.catalog_for`): a show reads the pins in
its one query and asks nothing more once the set of versions was seen; a new
pinned version brings its new types at once; nothing of one tenant's pins
reaches another tenant's environments.  On SQLite and on PostgreSQL (the pins
are aggregated by each database's own function)."""
from __future__ import annotations

import json

import pytest
from sqlalchemy import event

from apikit import reset_postgres
from packagekit import zip_of
from services import postgres_url
from test_packages_api import packages_api, uploaded

SIGNATURE = "sig-only-mine-4217"   # named like no password: only a type says it is secret
NOTE = {"extends": "linuxService",
        "schema": {"required": ["text"], "properties": {"text": {"type": "string"}}}}
SIGNED = {"extends": "linuxService",
          "schema": {"required": ["signature"],
                     "properties": {"signature": {"type": "string", "writeOnly": True}}}}


def package(version: str, types: dict) -> bytes:
    return zip_of({"package.json": json.dumps({"name": "notes", "version": version}).encode(),
                   "workflows/Notes.xml": b"<workflow/>",
                   "types.json": json.dumps({"types": types}).encode()})


@pytest.fixture(params=["sqlite", "postgresql"])
def api(request, tmp_path):
    if request.param == "sqlite":
        yield packages_api(f"sqlite:///{tmp_path / 'catalogs.sqlite'}")
        return
    url = postgres_url()
    reset_postgres(url)
    made = packages_api(url)
    yield made
    made.store.sessions.kw["bind"].dispose()
    reset_postgres(url)


def environment(api, name: str, headers: dict | None = None) -> str:
    answer = api.client.post("/environments", json={"name": name}, headers=headers or {})
    assert answer.status_code == 200, answer.text
    return answer.json()["id"]


def pin(api, env_id: str, version: str, headers: dict | None = None) -> None:
    answer = api.client.put(f"/environments/{env_id}/packages/notes",
                            content=json.dumps({"version": version}),
                            headers={"Content-Type": "application/json", **(headers or {})})
    assert answer.status_code == 200, answer.text


def types(api, env_id: str, headers: dict | None = None) -> set[str]:
    answer = api.client.get(f"/types?environment={env_id}", headers=headers or {})
    assert answer.status_code == 200, answer.text
    return {t["name"] for t in answer.json()["types"]}


def add(api, env_id: str, service: dict, headers: dict | None = None):
    headers = headers or {}
    session = api.client.post(f"/environments/{env_id}/configure", headers=headers).json()["id"]
    answer = api.client.post(f"/environments/{env_id}/services",
                             json={"name": "memo", "osImage": {"name": "local", "type": "linux"},
                                   "units": [{}], **service},
                             headers={"X-Configuration-Session": session, **headers})
    return answer, session


def shown(api, env_id: str, session: str, headers: dict | None = None) -> str:
    answer = api.client.get(f"/environments/{env_id}",
                            headers={"X-Configuration-Session": session, **(headers or {})})
    assert answer.status_code == 200, answer.text
    return answer.text


def test_a_new_pinned_version_brings_its_new_types(api):
    uploaded(api, package("1.0.0", {"notesNote": NOTE}))
    uploaded(api, package("2.0.0", {"notesNote": NOTE, "notesSigned": SIGNED}))
    env_id, other = environment(api, "moves"), environment(api, "stays")
    pin(api, env_id, "1.0.0")
    pin(api, other, "1.0.0")
    assert {"notesNote"} <= types(api, env_id) and "notesSigned" not in types(api, env_id)
    refused, _ = add(api, env_id, {"type": "notesSigned", "signature": SIGNATURE})
    assert refused.status_code == 400 and "notesSigned" in refused.text

    pin(api, env_id, "2.0.0")                   # 1.0.0's catalog is remembered by now
    assert {"notesNote", "notesSigned"} <= types(api, env_id)
    answer, session = add(api, env_id, {"type": "notesSigned", "signature": SIGNATURE})
    assert answer.status_code == 200, answer.text
    text = shown(api, env_id, session)          # the new type's secret is masked
    assert SIGNATURE not in text and '"signature":"***"' in text.replace(" ", "")
    assert "notesSigned" not in types(api, other)   # still pinned to 1.0.0

    pin(api, env_id, "1.0.0")                   # and back
    assert "notesSigned" not in types(api, env_id)


def test_another_tenants_pins_never_reach_its_environments(api):
    theirs = api.as_tenant("t2")
    uploaded(api, package("1.0.0", {"notesSigned": SIGNED}))    # t1's own package
    mine, their_env = environment(api, "mine"), environment(api, "theirs", theirs)
    pin(api, mine, "1.0.0")
    answer, session = add(api, mine, {"type": "notesSigned", "signature": SIGNATURE})
    assert answer.status_code == 200, answer.text
    for _ in range(2):      # t1's catalog remembered, asked again in between
        assert SIGNATURE not in shown(api, mine, session)
        assert "notesSigned" in types(api, mine)
        assert "notesSigned" not in types(api, their_env, theirs)
        refused, _ = add(api, their_env, {"type": "notesSigned", "signature": SIGNATURE},
                         theirs)
        assert refused.status_code == 400 and "notesSigned" in refused.text
    # t2 cannot pin t1's private package either (the cache gives it no way in)
    refused = api.client.put(f"/environments/{their_env}/packages/notes", content=b"",
                             headers={"Content-Type": "application/json", **theirs})
    assert refused.status_code == 404


def test_a_show_of_a_pinned_environment_is_one_query_once_its_versions_were_seen(api):
    uploaded(api, package("1.0.0", {"notesSigned": SIGNED}))
    env_id = environment(api, "counted")
    pin(api, env_id, "1.0.0")
    answer, session = add(api, env_id, {"type": "notesSigned", "signature": SIGNATURE})
    assert answer.status_code == 200, answer.text
    statements: list[str] = []
    engine = api.store.sessions.kw["bind"]

    def count(_conn, _cursor, statement, *_args) -> None:
        statements.append(statement)
    event.listen(engine, "before_cursor_execute", count)
    try:
        assert SIGNATURE not in shown(api, env_id, session)   # may read the types once
        statements.clear()
        text = shown(api, env_id, session)
        answer = api.client.get(f"/environments/{env_id}")
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert SIGNATURE not in text and answer.status_code == 200
    # one for the environment with its pins, one for the session; then one
    assert len(statements) == 3, statements
