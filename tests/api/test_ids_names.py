"""One rule for the ids and names the API takes, checked at the door.

What passes the API must pass the message contract (ids of 1 to 64
characters, ``fornace.common.names``) and the database (PostgreSQL refuses
NUL in text; ids live in String(64) columns): a service or unit id, a
service, unit or environment name the rule refuses is a 400 naming the field
(``services[0].units[1].id``), on every route that creates or changes one.
"""
from __future__ import annotations

from typing import Any

import pytest

from apikit import Api, web_server
from test_dashboard import create_env, field_error, site_form
from test_dashboard import browser  # noqa: F401 -- the fixture
from test_names import api, pg_api  # noqa: F401 -- the fixtures

SESSION = "X-Configuration-Session"
LONG_ID = "s" * 10_000
UNIT_ID = "u" * 300


def environment(api: Api) -> tuple[str, str]:
    env = api.client.post("/environments", json={"name": "ids"}).json()
    session = api.client.post(f"/environments/{env['id']}/configure").json()["id"]
    return env["id"], session


def send(api: Api, method: str, env_id: str, session: str, body: Any, path: str = "") -> Any:
    return api.client.request(method, f"/environments/{env_id}/services{path}", json=body,
                              headers={SESSION: session})


def refused(response: Any, field: str) -> str:
    """The message of a 400 that names ``field`` first; the field is also given apart."""
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["message"].startswith(f"{field}: "), error["message"]
    assert error.get("field") == field, error
    return error["message"]


def stored(api: Api, env_id: str, session: str) -> list[dict[str, Any]]:
    return api.client.get(f"/environments/{env_id}/services", headers={SESSION: session}).json()


# -- names: no NUL or other control character ----------------------------------------------

def test_a_nul_in_a_service_name_is_refused_at_the_door_on_postgresql(pg_api):
    """PostgreSQL cannot hold a NUL in text: the deployment's reports (which
    quote the name) would be refused.  It stops at the door instead."""
    env_id, session = environment(pg_api)
    message = refused(send(pg_api, "POST", env_id, session, web_server("web\x00x")), "name")
    assert "control character" in message and "U+0000" in message
    refused(send(pg_api, "POST", env_id, session, [web_server("web\x00x")]), "services[0].name")
    assert stored(pg_api, env_id, session) == []


@pytest.mark.parametrize("field,value", [
    ("flavor", "m1\x00.small"),                      # any string a workflow may report
    ("units[0].location", "west\x00"),
    ("osImage.name", "ima\x00ge"),
])
def test_a_nul_in_any_field_of_a_service_is_refused_at_its_path_on_postgresql(pg_api, field,
                                                                            value):
    env_id, session = environment(pg_api)
    service = web_server("web")
    if field.startswith("units[0]."):
        service["units"][0][field.split(".", 1)[1]] = value
    elif field == "osImage.name":
        service["osImage"] = {"name": value, "type": "linux"}
    else:
        service[field] = value
    message = refused(send(pg_api, "POST", env_id, session, service), field)
    assert "NUL" in message and "\x00" not in message
    assert stored(pg_api, env_id, session) == []


@pytest.mark.parametrize("name", ["web\nfake log line", "esc\x1b[31m", "del\x7f",
                                  "sep\u2028arator", "c1\x85"])
def test_control_characters_in_service_and_unit_names_are_refused(api, name):
    env_id, session = environment(api)
    refused(send(api, "POST", env_id, session, web_server(name)), "name")
    unit = web_server("web", units=[{"location": "x"}, {"name": name}])
    refused(send(api, "POST", env_id, session, unit), "units[1].name")
    refused(send(api, "POST", env_id, session, [web_server("ok"), unit]),
            "services[1].units[1].name")
    assert stored(api, env_id, session) == []


def test_names_in_any_language_are_fine(api):
    env_id, session = environment(api)
    added = send(api, "POST", env_id, session, web_server("Küche 東京 web-1 (prod)"))
    assert added.status_code == 200, added.text


def test_a_service_name_leaves_room_for_its_units_names(api):
    """Units are named ``<service name>_instance_<n>`` and task records keep a
    name in 255 characters: a service name has at most 200."""
    env_id, session = environment(api)
    assert send(api, "POST", env_id, session, web_server("n" * 200)).status_code == 200
    refused(send(api, "POST", env_id, session, web_server("m" * 201)), "name")
    refused(send(api, "POST", env_id, session,
                 web_server("w", units=[{"name": "x" * 256}])), "units[0].name")


def test_a_rename_by_sub_path_or_whole_list_follows_the_rule(api):
    env_id, session = environment(api)
    service = send(api, "POST", env_id, session, web_server("web")).json()
    refused(send(api, "PUT", env_id, session, "web\x00", f"/{service['id']}/name"), "name")
    whole = stored(api, env_id, session)
    whole[0]["units"][0]["name"] = "unit\ttab"
    refused(send(api, "PUT", env_id, session, whole), "services[0].units[0].name")
    assert stored(api, env_id, session)[0]["name"] == "web"


def test_environment_names_follow_the_same_rule(api):
    for name in ("env\x00", "env\nname", "env\x1b"):
        response = api.client.post("/environments", json={"name": name})
        assert response.status_code == 400, response.text
        assert "name" in response.json()["error"]["message"]
    assert api.client.post("/environments", json={"name": "Umgebung 1"}).status_code == 200


# -- ids the client gives: the contract's id rule --------------------------------------------

def test_the_url_lookup_agrees_with_the_rule():
    """An id the rule takes can always be looked up (api/ids.py: the id columns)."""
    from fornace.api import ids
    from fornace.common import names
    assert ids.ID_LENGTH == names.ID_MAX
    assert ids.could_be_id("x" * names.ID_MAX) and not ids.could_be_id("x" * (names.ID_MAX + 1))
    assert not ids.could_be_id("a\x00")


@pytest.mark.parametrize("bad", [LONG_ID, "x" * 65, "a/b", "..", "", " ", "-lead", "id\x00",
                                 "caf\u00e9", "two words"])
def test_a_service_id_outside_the_rule_is_refused(api, bad):
    env_id, session = environment(api)
    message = refused(send(api, "POST", env_id, session, {**web_server(), "id": bad}), "id")
    assert len(message) < 400   # the value is not echoed whole
    refused(send(api, "POST", env_id, session, [web_server("a"), {**web_server("b"), "id": bad}]),
            "services[1].id")
    assert stored(api, env_id, session) == []


def test_a_unit_id_outside_the_rule_is_refused_on_create_and_update(api):
    env_id, session = environment(api)
    units = [{"id": "u-1"}, {"id": UNIT_ID}]
    refused(send(api, "POST", env_id, session, web_server(units=units)), "units[1].id")
    refused(send(api, "POST", env_id, session, [web_server(units=units)]),
            "services[0].units[1].id")
    service = send(api, "POST", env_id, session, web_server(units=[{"id": "u-1"}])).json()
    path = f"/{service['id']}/units"
    refused(send(api, "POST", env_id, session, {"id": UNIT_ID}, path), "units[1].id")
    refused(send(api, "PUT", env_id, session, UNIT_ID, f"{path}/0/id"), "units[0].id")
    whole = stored(api, env_id, session)
    whole[0]["units"].append({"id": "bad id"})
    refused(send(api, "PUT", env_id, session, whole), "services[0].units[1].id")
    whole[0]["units"].pop()
    whole[0]["id"] = LONG_ID
    refused(send(api, "PUT", env_id, session, whole), "services[0].id")
    assert [u["id"] for u in stored(api, env_id, session)[0]["units"]] == ["u-1"]


def test_ids_inside_the_rule_are_kept_as_given(api):
    env_id, session = environment(api)
    given = {**web_server(units=[{"id": "Unit_1.a-" + "z" * 55}]), "id": "Svc-" + "9" * 60}
    added = send(api, "POST", env_id, session, given)
    assert added.status_code == 200, added.text
    assert added.json()["id"] == given["id"]
    assert added.json()["units"][0]["id"] == given["units"][0]["id"]


def test_the_dashboard_form_shows_a_bad_name_at_its_field(browser):
    env_id = create_env(browser)
    page = browser.post(f"/environments/{env_id}/services/new", site_form(name="site\x1b[2J"))
    assert page.status_code == 400, page.text
    assert "control character" in (field_error(page.text, "name") or ""), page.text
