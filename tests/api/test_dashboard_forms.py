"""The dashboard's service form as the type catalog describes it.

Labels, help and defaults come from the types' schemas in
``data/types.json`` (checked here for every field of every type); a type's
form has only the fields its workflows use; every error is shown at once,
next to its input, with what was typed kept; ``dependsOn`` is a choice among
the environment's other services.
"""
from __future__ import annotations

import json
import re

import pytest

from fornace.api import specs
from fornace.api.dashboard import fieldinfo, serviceform
from fornace.api.dashboard.sessions import open_session
from fornace.api.context import Context
from fornace.common.catalog import CatalogError, load_catalog
from fornace.common.resources import BUILTIN_DATA
from fornace.common.secrets import MASK
from test_dashboard import create_env, field_error, site_form
from test_dashboard import api, browser  # noqa: F401 -- the fixtures

SERVER_OWNED = {"id", "type", "created", "updated"}
WINDOWS_ONLY = {"adminPassword", "domain", "availabilityZone"}
CTX = Context(tenant_id="t1", user_id="u1")    # the noauth defaults of make_api
CATALOG_FILE = BUILTIN_DATA / "types.json"
LINUX = ("linuxWebServer", "linuxWebServerFarm", "linuxApp", "linuxAppFarm")


def input_value(page: str, name: str) -> str | None:
    """The value attribute of the input named ``name`` (None: no such input)."""
    found = re.search(rf'<input [^>]*name="{re.escape(name)}" value="([^"]*)"', page)
    return found.group(1) if found else None


def session_services(api, env_id: str) -> list[dict]:
    """The services of the dashboard user's open session (masked)."""
    session = open_session(api.store, CTX, env_id)
    return api.store.environments.get(CTX, env_id, session["id"])["services"]


def label_of(page: str, name: str) -> str | None:
    found = re.search(rf'<label for="in-{re.escape(name)}"[^>]*>([^<]*)', page)
    return found.group(1).strip() if found else None


# -- the schemas' form keywords ------------------------------------------------------------

@pytest.mark.parametrize("type_name", sorted(specs.SERVICE_TYPES))
def test_every_field_of_every_type_has_a_label_and_help_in_the_catalog(type_name):
    spec = specs.SERVICE_TYPES[type_name]
    for name, field in spec.service_fields().items():
        if name in SERVER_OWNED:
            continue
        about = fieldinfo.field_info(field)
        assert about.declared and about.help, (type_name, name)
        assert about.label != name or name == "name", (type_name, name, "a raw key as label")
        if field.required:
            assert about.shown, (type_name, name, "a required field left out of the form")
    for field in spec.unit_fields:
        about = fieldinfo.field_info(field)
        assert about.declared and about.help, (type_name, "units", field.name)


@pytest.mark.parametrize("type_name", sorted(specs.SERVICE_TYPES))
def test_defaults_pass_the_checks_and_secrets_are_password_inputs(type_name):
    spec = specs.SERVICE_TYPES[type_name]
    for name, field in spec.service_fields().items():
        if field.default is not None:
            specs.check_value(field.schema, field.default, name)
        if field.secret:
            assert serviceform._widget(field, fieldinfo.field_info(field)) == "password"


@pytest.mark.parametrize("type_name", LINUX)
def test_linux_types_offer_no_windows_fields(type_name):
    shown = {field.name for field, _ in
             serviceform.shown_fields(specs.SERVICE_TYPES[type_name])}
    assert not shown & WINDOWS_ONLY, shown & WINDOWS_ONLY
    assert {"name", "osImage", "dependsOn"} <= shown


def test_windows_types_keep_their_fields_and_no_type_offers_what_nothing_uses():
    shown = {field.name for field, _ in
             serviceform.shown_fields(specs.SERVICE_TYPES["webServer"])}
    assert {"domain", "adminPassword", "availabilityZone"} <= shown
    for spec in specs.SERVICE_TYPES.values():
        names = {field.name for field, _ in serviceform.shown_fields(spec)}
        assert "keyPair" not in names and "uri" not in names, spec.name


@pytest.mark.parametrize("change,message", [
    (lambda t: t["linuxWebServer"]["schema"]["properties"]["port"].update(lable="Port"),
     r"types\.json:1: type 'linuxWebServer': schema\.properties\.port: unsupported keyword"
     r"\(s\) lable"),
    (lambda t: t["linuxWebServer"]["schema"]["properties"]["port"].update(type="int"),
     r"types\.json:1: type 'linuxWebServer': schema\.properties\.port\.type: 'int' is not"),
    (lambda t: t["service"]["schema"]["properties"]["name"].update({"x-form": "no"}),
     r"type 'service': schema\.properties\.name\.x-form must be true or false"),
    (lambda t: t["msSqlClusterServer"]["schema"]["properties"]["clusterName"].update(
        {"x-check": "netbios"}), r"type 'msSqlClusterServer': schema\.properties\.clusterName"
                                 r"\.x-check: unknown check 'netbios'"),
    (lambda t: t["activeDirectory"]["schema"].update({"x-check": "one-master"}),
     r"type 'activeDirectory': schema\.x-check: unknown service check 'one-master'"),
    (lambda t: t["linuxApp"]["schema"]["required"].append("sourc"),
     r"type 'linuxApp': schema\.required: sourc not in its properties"),
    (lambda t: t["linuxApp"]["schema"]["properties"]["port"].update({"x-check": "url-path"}),
     r"type 'linuxApp': schema\.properties\.port\.x-check: 'url-path' judges string values"),
])
def test_a_mistake_in_a_schema_names_the_file_and_the_type(tmp_path, change, message):
    document = json.loads(CATALOG_FILE.read_text())
    change(document["types"])
    path = tmp_path / "types.json"
    path.write_text(json.dumps(document))
    with pytest.raises(CatalogError, match=message):
        load_catalog(path)


# -- the form -----------------------------------------------------------------------------

def test_a_new_form_shows_labels_help_and_defaults_and_only_the_types_fields(browser):
    env_id = create_env(browser)
    page = browser.get(f"/environments/{env_id}/services/new?type=linuxWebServerFarm")
    assert label_of(page, "unitNamingPattern").startswith("Unit hostname pattern")
    assert label_of(page, "loadBalancerPort").startswith("Load balancer port")
    assert re.search(r'<legend title="osImage">Operating system image<', page)
    assert label_of(page, "osImage-name").startswith("Name")
    assert "farm&#39;s URL is http://" in page          # the catalog's help
    assert input_value(page, "port") == "8080"
    assert input_value(page, "flavor") == "m1.small"
    # the image's name and type, each in its own input: no JSON to edit
    assert input_value(page, "osImage.name") == "debian-12"
    assert input_value(page, "osImage.type") == "linux"
    assert "&#34;name&#34;" not in page
    for absent in ("adminPassword", "domain", "availabilityZone", "keyPair"):
        assert f'name="{absent}"' not in page, absent
    app = browser.get(f"/environments/{env_id}/services/new?type=linuxApp")
    assert input_value(app, "healthPath") == "/" and input_value(app, "startTimeout") == "60"
    windows = browser.get(f"/environments/{env_id}/services/new?type=webServerFarm")
    assert input_value(windows, "loadBalancerPort") == "80"
    assert label_of(windows, "adminPassword") == "Administrator password"


def test_every_error_is_shown_at_once_with_what_was_typed_kept(browser):
    env_id = create_env(browser)
    response = browser.post(f"/environments/{env_id}/services/new", site_form(
        name="", port="70000", unitNamingPattern="web_#", units="0",
        **{"osImage.name": "", "osImage.type": "linux"}))
    assert response.status_code == 400
    page = response.text
    assert field_error(page, "name") == "must not be empty"
    assert "between 1 and 65535" in field_error(page, "port")
    assert "may only contain" in field_error(page, "unitNamingPattern")
    assert field_error(page, "osImage") == "osImage.name: required"
    assert "needs at least one unit" in field_error(page, "units")
    summary = re.search(r'<div class="panel panel-error" id="form-errors">(.*?)</div>', page,
                        re.S).group(1)
    assert "5 fields need correcting" in summary
    assert re.findall(r'href="#field-(\w+)"', summary) == [
        "name", "port", "unitNamingPattern", "osImage", "units"]
    assert input_value(page, "port") == "70000"
    assert input_value(page, "unitNamingPattern") == "web_#"
    assert input_value(page, "osImage.name") == ""
    assert input_value(page, "osImage.type") == "linux"
    assert input_value(page, "units") == "0"
    # text that is not a number stays in its input too
    typed = browser.post(f"/environments/{env_id}/services/new",
                         site_form(port="eighty", units="two"))
    assert input_value(typed.text, "port") == "eighty"
    assert input_value(typed.text, "units") == "two"
    assert "got 'eighty'" in field_error(typed.text, "port")
    assert "got 'two'" in field_error(typed.text, "units")


def test_field_and_cross_field_errors_of_a_windows_type(browser):
    env_id = create_env(browser)
    path = f"/environments/{env_id}/services/new"
    both = browser.post(path, {"type": "msSqlServer", "name": "db", "mixedModeAuth": "true",
                               "domain": "a..b", "units": "1"})
    assert both.status_code == 400
    assert "must be a DNS domain name" in field_error(both.text, "domain")
    # the whole-service rule (sa password with mixed mode) once the fields are right
    rule = browser.post(path, {"type": "msSqlServer", "name": "db", "mixedModeAuth": "true",
                               "units": "1"})
    assert "required when mixedModeAuth is true" in field_error(rule.text, "saPassword")
    units = browser.post(path, {"type": "activeDirectory", "name": "ad", "domain": "x..y",
                                "adminPassword": "Adm1n-Secret", "units": "2",
                                "unit_settings": '[{"isMaster": "yes"}]'})
    assert "must be a DNS domain name" in field_error(units.text, "domain")
    assert "units[0].isMaster: must be a boolean" in field_error(units.text, "unit_settings")
    assert "Adm1n-Secret" not in units.text


def test_depends_on_is_a_choice_among_the_other_services_by_name(api, browser):
    env_id = create_env(browser)
    path = f"/environments/{env_id}/services/new"
    assert browser.post(path, site_form(name="db")).status_code == 303
    assert browser.post(path, site_form(name="cache")).status_code == 303
    form = browser.get(f"{path}?type=linuxWebServer")
    choices = dict(re.findall(r'name="dependsOn" value="([0-9a-f]+)" *> ([^<]+)', form))
    assert sorted(choices.values()) == ["cache (linuxWebServer)", "db (linuxWebServer)"]
    ids = {text.split(" ")[0]: value for value, text in choices.items()}
    added = browser.post(path, {**site_form(name="front"), "dependsOn": [ids["db"], ids["cache"]]})
    page = browser.follow(added)
    front = next(s for s in session_services(api, env_id) if s["name"] == "front")
    assert front["dependsOn"] == [ids["db"], ids["cache"]]
    # the edit form: the others offered, chosen as stored; the service itself is not offered
    edit = browser.get(f"/environments/{env_id}/services/{front['id']}/edit")
    assert re.search(rf'value="{ids["db"]}" checked', edit)
    assert f'value="{front["id"]}"' not in re.findall(r'name="dependsOn" value="[^"]+"', edit)
    assert "added: <b>front</b>" in page
    # choosing none removes the dependency
    cleared = browser.post(f"/environments/{env_id}/services/{front['id']}/edit",
                           site_form(name="front"))
    assert cleared.status_code == 303, cleared.text
    front = next(s for s in session_services(api, env_id) if s["name"] == "front")
    assert "dependsOn" not in front


def test_fields_the_form_leaves_out_are_kept_by_an_edit(api, browser):
    env_id = create_env(browser)
    headers = {"X-Tenant-Id": "t1", "X-User-Id": "u1"}
    session = api.client.post(f"/environments/{env_id}/configure", headers=headers).json()["id"]
    created = api.client.post(
        f"/environments/{env_id}/services", headers={**headers, "X-Configuration-Session": session},
        json={"name": "legacy", "type": "linuxWebServer", "adminPassword": "Old-Secret-1",
              "keyPair": "ops-key", "units": [{}]})
    assert created.status_code == 200, created.text
    service_id = created.json()["id"]
    edit = browser.get(f"/environments/{env_id}/services/{service_id}/edit")
    assert 'name="adminPassword"' not in edit and 'name="keyPair"' not in edit
    saved = browser.post(f"/environments/{env_id}/services/{service_id}/edit",
                         site_form(name="legacy2", units="1"))
    assert saved.status_code == 303, saved.text
    service = session_services(api, env_id)[0]
    assert service["name"] == "legacy2" and service["keyPair"] == "ops-key"
    assert service["adminPassword"] == MASK   # still stored (shown masked)


def test_a_name_another_service_has_is_an_error_at_the_name(browser):
    env_id = create_env(browser)
    path = f"/environments/{env_id}/services/new"
    assert browser.post(path, site_form(name="site")).status_code == 303
    again = browser.post(path, site_form(name="site", port="8081"))
    assert again.status_code == 400
    assert "a service named 'site'" in field_error(again.text, "name")
    assert input_value(again.text, "port") == "8081"


# -- a type of a data folder's catalog --------------------------------------------------

NOTE = {"extends": "linuxService", "schema": {
    "description": "a note written on each unit",
    "required": ["type", "name", "text", "units"],
    "properties": {
        "text": {"type": "string", "x-check": "nonblank", "title": "Note text",
                 "description": "What each unit writes down.", "default": "hello"},
        "copies": {"type": "integer", "minimum": 1, "maximum": 5, "title": "Copies",
                   "description": "How many times."},
        "signature": {"type": "string", "writeOnly": True, "title": "Signature",
                      "description": "Kept secret."}}}}


@pytest.fixture
def note_browser(tmp_path):
    from apikit import make_api
    from test_dashboard import Browser

    document = json.loads(CATALOG_FILE.read_text())
    document["types"]["linuxNote"] = NOTE
    path = tmp_path / "types.json"
    path.write_text(json.dumps(document))
    return Browser(make_api(f"sqlite:///{tmp_path / 'dash.sqlite'}",
                            catalog=load_catalog(path)).client)


def test_the_form_of_a_type_the_catalog_adds_comes_from_its_schema(note_browser):
    env_id = create_env(note_browser)
    assert "linuxNote" in note_browser.get(f"/environments/{env_id}/services/new")
    page = note_browser.get(f"/environments/{env_id}/services/new?type=linuxNote")
    assert label_of(page, "text").startswith("Note text") and "What each unit" in page
    assert input_value(page, "text") == "hello"
    assert 'type="password"' in page and label_of(page, "signature").startswith("Signature")
    assert 'name="availabilityZone"' not in page     # linuxService's x-form: false
    form = {"type": "linuxNote", "name": "memo", "text": "hi", "copies": "9",
            "signature": "s1gn3d", "units": "1", "osImage": "debian-12"}
    bad = note_browser.post(f"/environments/{env_id}/services/new", form)
    assert bad.status_code == 400
    assert "must be between 1 and 5" in field_error(bad.text, "copies")
    assert "s1gn3d" not in bad.text                   # a page never holds a secret
    assert note_browser.post(f"/environments/{env_id}/services/new",
                             {**form, "copies": "2"}).status_code == 303


# -- the environment form -----------------------------------------------------------------

def test_the_environment_form_takes_a_region_and_the_page_shows_it(api, browser):
    listing = browser.get("/")
    assert 'name="region"' in listing and label_of(listing, "env-region")
    response = browser.post("/environments", {"name": "regional", "region": "  RegionTwo "})
    assert response.status_code == 303
    page = browser.follow(response)
    assert "Environment regional created in region RegionTwo." in page
    assert '<span id="env-region">RegionTwo</span>' in page
    env_id = response.headers["location"].rsplit("/", 1)[1]
    assert api.client.get(f"/environments/{env_id}").json()["region"] == "RegionTwo"
    assert api.client.get(f"/environments/{env_id}/model/region").json() == "RegionTwo"
    # left empty: no region, the conductor's default
    plain = browser.post("/environments", {"name": "plain", "region": "   "})
    plain_id = plain.headers["location"].rsplit("/", 1)[1]
    assert api.client.get(f"/environments/{plain_id}").json()["region"] is None
    assert 'id="env-region" title="the conductor' in browser.follow(plain)


def test_a_bad_region_in_the_environment_form_is_shown_and_nothing_created(api, browser):
    bad = browser.follow(browser.post("/environments", {"name": "bad", "region": "x" * 300}))
    assert "The environment region is not valid: String should have at most 255 " \
           "characters" in bad
    control = browser.follow(browser.post("/environments", {"name": "bad", "region": "a\tb"}))
    assert "The environment region is not valid" in control and "control characters" in control
    assert api.client.get("/environments").json()["environments"] == []
