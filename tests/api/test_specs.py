"""Service object specs of the REST API (api/specs.py)."""
from __future__ import annotations

import copy
import json
import pickle
import re

import pytest

from fornace.api import specs
from fornace.api.specs import (SpecError, keep_secrets, masked_view, prepare_new,
                               prepare_units, validate_create, validate_update, check_value)
from fornace.common.catalog import Catalog, load_catalog
from fornace.common.resources import BUILTIN_DATA
from fornace.common.secrets import MASK

HEX32 = re.compile(r"[0-9a-f]{32}")
NOW = "2013-06-06T10:00:00Z"


def examples() -> dict[str, dict]:
    """A valid create spec of every service type (fresh copies each call)."""
    return {
        "activeDirectory": {
            "type": "activeDirectory", "name": "acme.dc", "domain": "acme.dc",
            "adminPassword": "Adm1n!Pass", "unitNamingPattern": "ad#-loc",
            "availabilityZone": "nova", "flavor": "m1.medium", "osImage": "ws-2012-std",
            "units": [{"isMaster": True, "recoveryPassword": "R3cover!1", "location": "west-dc"},
                      {"isMaster": False, "recoveryPassword": "R3cover!2"}],
        },
        "webServer": {  # the seed's own payload
            "name": "frontend", "type": "webServer", "adminPassword": "password",
            "domain": "acme.dc", "units": [{"location": "west-dc"}],
        },
        "aspNetApp": {
            "type": "aspNetApp", "name": "shop", "repository": "https://git.example.com/shop.git",
            "domain": "acme.dc", "adminPassword": "Adm1n!Pass", "uri": "http://10.0.0.5",
            "units": [{}],
        },
        "webServerFarm": {
            "type": "webServerFarm", "name": "farm", "loadBalancerPort": 80,
            "unitNamingPattern": "farm#", "units": [{}, {}],
        },
        "aspNetAppFarm": {
            "type": "aspNetAppFarm", "name": "shopfarm",
            "repository": "https://git.example.com/shop.git", "loadBalancerPort": 8080,
            "domain": None, "units": [{}, {}, {}],
        },
        "msSqlServer": {
            "type": "msSqlServer", "name": "db", "mixedModeAuth": True,
            "saPassword": "Sa!Pass1", "domain": "acme.dc", "adminPassword": "Adm1n!Pass",
            "units": [{}],
        },
        "msSqlClusterServer": {
            "type": "msSqlClusterServer", "name": "sqlcluster", "domain": "acme.dc",
            "adminPassword": "Adm1n!Pass", "domainAdminUserName": "Administrator",
            "domainAdminPassword": "D0main!Pass", "clusterName": "sqlclu01",
            "clusterIP": "10.0.0.50", "agGroupName": "ag-main", "agListenerName": "aglisten",
            "agListenerIP": "10.0.0.51", "sqlServiceUserName": "sqlsvc",
            "sqlServicePassword": "Sql!Svc1", "mixedModeAuth": False,
            "databases": ["orders", "billing"], "dependsOn": ["ad-service-id"],
            "units": [{"isMaster": True, "isSync": True}, {"isMaster": False, "isSync": True},
                      {"isMaster": False}],
        },
        "linuxWebServer": {
            "type": "linuxWebServer", "name": "site", "port": 8080, "flavor": "m1.small",
            "osImage": {"name": "debian-12", "type": "linux"}, "keyPair": "ops",
            "unitNamingPattern": "web#", "units": [{"id": "unit0001"}, {"name": "site_b"}],
        },
        "linuxApp": {
            "type": "linuxApp", "name": "hello", "source": "/srv/apps/hello",
            "startCommand": "python3 app.py", "port": 8000, "healthPath": "/health",
            "env": {"GREETING": "Hi"}, "startTimeout": 30, "units": [{}],
        },
        "linuxWebServerFarm": {
            "type": "linuxWebServerFarm", "name": "sites", "port": 8080,
            "loadBalancerPort": 80, "units": [{}, {}],
        },
        "linuxAppFarm": {
            "type": "linuxAppFarm", "name": "hellos",
            "source": "https://git.example.com/hello.git", "revision": "main",
            "startCommand": "python3 app.py", "port": 8000, "loadBalancerPort": 8080,
            "units": [{}, {}],
        },
    }


REQUIRED = {
    "activeDirectory": ["type", "name", "domain", "adminPassword", "units"],
    "webServer": ["type", "name", "units"],
    "aspNetApp": ["type", "name", "repository", "units"],
    "webServerFarm": ["type", "name", "loadBalancerPort", "units"],
    "aspNetAppFarm": ["type", "name", "repository", "loadBalancerPort", "units"],
    "msSqlServer": ["type", "name", "mixedModeAuth", "units"],
    "msSqlClusterServer": ["type", "name", "domain", "adminPassword", "domainAdminUserName",
                           "domainAdminPassword", "clusterName", "clusterIP", "agGroupName",
                           "agListenerName", "agListenerIP", "sqlServiceUserName",
                           "sqlServicePassword", "units"],
    "linuxWebServer": ["type", "name", "units"],
    "linuxApp": ["type", "name", "source", "startCommand", "port", "units"],
    "linuxWebServerFarm": ["type", "name", "loadBalancerPort", "units"],
    "linuxAppFarm": ["type", "name", "source", "startCommand", "port", "loadBalancerPort",
                     "units"],
}
REQUIRED_CASES = [(t, f) for t, fields in REQUIRED.items() for f in fields]
BOTH = pytest.mark.parametrize("validate", [validate_create, validate_update],
                               ids=["create", "update"])


def example(kind: str, **changes) -> dict:
    service = examples()[kind]
    service.update(changes)
    return service


def error_of(validate, service) -> SpecError:
    with pytest.raises(SpecError) as caught:
        validate(service)
    return caught.value


# -- SpecError and the registry -------------------------------------------------

def test_spec_error_names_field_and_message():
    error = SpecError("units[1].isMaster", "must be a boolean")
    assert isinstance(error, ValueError)
    assert (error.field, error.message) == ("units[1].isMaster", "must be a boolean")
    assert str(error) == "units[1].isMaster: must be a boolean"
    again = pickle.loads(pickle.dumps(error))
    assert (again.field, again.message, str(again)) == (error.field, error.message, str(error))


def test_every_type_is_registered_and_has_an_example():
    assert set(specs.SERVICE_TYPES) == set(REQUIRED) == set(examples())


def catalog_with(tmp_path, **types) -> Catalog:
    """The built-in catalog plus ``types`` (name -> catalog entry), as a data
    folder's ``types.json``."""
    document = json.loads((BUILTIN_DATA / "types.json").read_text())
    document["types"].update(types)
    path = tmp_path / "types.json"
    path.write_text(json.dumps(document))
    return load_catalog(path)


MYSQL = {"extends": "linuxService", "doc": "MySQL on Linux", "schema": {
    "description": "MySQL server on Linux",
    "required": ["type", "name", "rootPassword", "units"],
    "properties": {
        "rootPassword": {"type": "string", "writeOnly": True, "x-check": "nonblank",
                         "title": "Root password", "description": "MySQL's root password."},
        "port": {"type": "integer", "minimum": 1, "maximum": 65535,
                 "x-noun": "a port number", "title": "Port", "description": "Its port."},
        "engine": {"type": "string", "enum": ["innodb", "myisam"], "title": "Engine",
                   "description": "Default storage engine."},
        "user": {"type": "string", "pattern": "^[a-z]+$"},
        "replicaOf": {"type": "string", "format": "ipv4"},
        "tags": {"type": "array", "minItems": 1, "items": {"type": "string"}}}}}


def test_a_type_is_added_as_data(tmp_path):
    catalog = catalog_with(tmp_path, linuxMySql=MYSQL)
    validate_create({"type": "linuxMySql", "name": "db", "rootPassword": "x1",
                     "osImage": "debian-12", "units": [{}]}, catalog)
    assert error_of(lambda s: validate_create(s, catalog), {
        "type": "linuxMySql", "name": "db", "units": [{}]}).field == "rootPassword"
    error = error_of(lambda s: validate_create(s, catalog), {
        "type": "linuxMySql", "name": "db", "rootPassword": "x", "port": 0, "units": [{}]})
    assert str(error) == "port: must be a port number between 1 and 65535"
    error = error_of(lambda s: validate_create(s, catalog), {
        "type": "linuxMySql", "name": "db", "rootPassword": "x", "engine": "csv",
        "units": [{}]})
    assert str(error) == "engine: must be one of 'innodb', 'myisam' (got 'csv')"
    base = {"type": "linuxMySql", "name": "db", "rootPassword": "x", "units": [{}]}
    for change, text in [
            ({"user": "Root"}, "user: must match the pattern '^[a-z]+$' (got 'Root')"),
            ({"replicaOf": "::1"}, "replicaOf: must be an IPv4 address (got '::1')"),
            ({"tags": []}, "tags: must have at least 1 item"),
            ({"tags": ["a", 2]}, "tags[1]: must be a string, not an integer")]:
        assert str(error_of(lambda s: validate_create(s, catalog), {**base, **change})) == text
    validate_create({**base, "user": "root", "replicaOf": "10.0.0.1", "tags": ["a"]}, catalog)
    with pytest.raises(SpecError, match="unknown service type 'linuxMySql'"):
        validate_create({"type": "linuxMySql", "name": "db", "units": [{}]})  # built-in
    # its declared secret is masked and kept, whatever its name
    MYSQL["schema"]["properties"]["rootKey"] = {"type": "string", "writeOnly": True}
    try:
        catalog = catalog_with(tmp_path, linuxMySql=MYSQL)
    finally:
        del MYSQL["schema"]["properties"]["rootKey"]
    stored = {"type": "linuxMySql", "rootKey": "k3y!", "units": [{"rootKey": "u"}]}
    view = masked_view(stored, catalog)
    assert view["rootKey"] == MASK and view["units"][0]["rootKey"] == MASK
    assert masked_view(stored)["rootKey"] == "k3y!"   # the built-in types have no rootKey
    assert keep_secrets(view, stored, catalog) == stored


def test_a_subtype_removes_and_relaxes_what_it_inherits():
    """linuxWebServerFarm drops linuxWebServer's Windows fields (``false``);
    msSqlClusterServer's own ``required`` leaves out msSqlServer's mixedModeAuth."""
    error = error_of(validate_create, example("linuxWebServerFarm", adminPassword="x"))
    assert error.field == "adminPassword" and "unknown field" in error.message
    validate_create(example("linuxWebServer", adminPassword="x"))
    cluster = examples()["msSqlClusterServer"]
    del cluster["mixedModeAuth"]
    validate_create(cluster)
    assert "mixedModeAuth" in specs.SERVICE_TYPES["msSqlClusterServer"].service_fields()


def test_fields_are_declared_as_data():
    farm = specs.SERVICE_TYPES["webServerFarm"].service_fields()["loadBalancerPort"]
    assert isinstance(farm, specs.FieldSpec)
    assert (farm.kinds, farm.required) == (("integer",), True)
    ad_units = specs.SERVICE_TYPES["activeDirectory"].unit_field_specs()
    assert ad_units["isMaster"].kinds == ("boolean",) and ad_units["isMaster"].required
    assert specs.SERVICE_TYPES["activeDirectory"].secrets == {"adminPassword",
                                                                "recoveryPassword"}


# -- valid objects ----------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(REQUIRED))
@BOTH
def test_valid_example_passes(kind, validate):
    service = examples()[kind]
    before = copy.deepcopy(service)
    validate(service)
    assert service == before  # validation never changes the object


@pytest.mark.parametrize("kind", sorted(REQUIRED))
def test_only_required_fields_pass(kind):
    service = examples()[kind]
    minimal = {k: service[k] for k in REQUIRED[kind]}
    if kind == "msSqlServer":
        minimal["mixedModeAuth"] = False  # else saPassword is required too
    validate_create(minimal)


def test_optional_fields_may_be_null():
    validate_create(example("webServer", domain=None, adminPassword=None, uri=None,
                            unitNamingPattern=None, osImage=None, dependsOn=None))
    validate_create(example("webServer", domain=""))  # "may be empty" (seed)


def test_stored_object_passes_update():
    """What prepare_new stores, plus what workflows add, is a valid update."""
    stored = prepare_new(examples()["activeDirectory"], NOW, [])
    stored["state"] = {"primaryDcIp": "10.0.0.4"}
    stored["temp"] = {}
    stored["units"][0]["state"] = {"hostname": "ad1-loc"}
    stored["units"][0]["temp"] = {"instanceName": "x"}
    stored["units"][0]["created"] = NOW
    validate_update(stored)
    with pytest.raises(SpecError, match="^state: unknown field for a activeDirectory service"):
        validate_create(stored)


# -- required fields ---------------------------------------------------------------

@pytest.mark.parametrize("kind,name", REQUIRED_CASES)
@BOTH
def test_missing_required_field_is_named(kind, name, validate):
    service = examples()[kind]
    del service[name]
    error = error_of(validate, service)
    assert error.field == name
    assert "required" in error.message


@pytest.mark.parametrize("kind,name", [(k, n) for k, n in REQUIRED_CASES
                                       if n not in ("type", "units")])
def test_required_field_must_not_be_null_or_blank(kind, name):
    error = error_of(validate_create, example(kind, **{name: None}))
    assert error.field == name and "null" in error.message
    if isinstance(examples()[kind][name], str):
        error = error_of(validate_create, example(kind, **{name: "  "}))
        assert error.field == name and "empty" in error.message


@pytest.mark.parametrize("kind,path,unit,name", [
    ("activeDirectory", "units[1].isMaster", 1, "isMaster"),
    ("activeDirectory", "units[0].recoveryPassword", 0, "recoveryPassword"),
    ("activeDirectory", "units[1].recoveryPassword", 1, "recoveryPassword"),
    ("msSqlClusterServer", "units[2].isMaster", 2, "isMaster"),
])
@BOTH
def test_missing_unit_field_is_named_with_index(kind, path, unit, name, validate):
    service = examples()[kind]
    del service["units"][unit][name]
    error = error_of(validate, service)
    assert (error.field, error.message) == (path, "required")


# -- wrong JSON types -----------------------------------------------------------------

WRONG_TYPES = [
    ("webServerFarm", "loadBalancerPort", "80", "must be an integer, not a string"),
    ("webServerFarm", "loadBalancerPort", True, "must be an integer, not a boolean"),
    ("webServerFarm", "loadBalancerPort", 80.0, "must be an integer, not a number"),
    ("webServerFarm", "loadBalancerPort", None, "must be an integer, not null"),
    ("webServerFarm", "loadBalancerPort", 0, "between 1 and 65535"),
    ("aspNetAppFarm", "loadBalancerPort", 65536, "between 1 and 65535"),
    ("msSqlServer", "mixedModeAuth", 1, "must be a boolean, not an integer"),
    ("msSqlServer", "mixedModeAuth", "true", "must be a boolean, not a string"),
    ("msSqlServer", "mixedModeAuth", None, "must be a boolean, not null"),
    ("msSqlServer", "saPassword", 1234, "must be a string, not an integer"),
    ("activeDirectory", "name", ["acme"], "must be a string, not a list"),
    ("activeDirectory", "domain", {"name": "acme"}, "must be a string, not an object"),
    ("activeDirectory", "domain", "acme..dc", "DNS domain name"),
    ("activeDirectory", "domain", "bad domain", "DNS domain name"),
    ("activeDirectory", "adminPassword", False, "must be a string, not a boolean"),
    ("webServer", "domain", 7, "must be a string, not an integer"),
    ("webServer", "uri", 7, "must be a string"),
    ("aspNetApp", "repository", 1, "must be a string"),
    ("linuxWebServer", "port", "8080", "must be an integer, not a string"),
    ("linuxWebServer", "port", False, "must be an integer, not a boolean"),
    ("linuxWebServer", "port", -1, "between 1 and 65535"),
    ("msSqlClusterServer", "clusterIP", "10.0.0.300", "IP address"),
    ("msSqlClusterServer", "agListenerIP", 10, "must be a string"),
    ("msSqlClusterServer", "clusterName", "a-very-long-cluster-name", "at most 15"),
    ("msSqlClusterServer", "agListenerName", "bad name", "network name"),
    ("msSqlClusterServer", "mixedModeAuth", "no", "must be a boolean"),
    ("msSqlClusterServer", "databases", "orders", "must be a list, not a string"),
    ("webServer", "id", "", "must not be empty"),
    ("webServer", "id", 12, "must be a string, not an integer"),
    ("webServer", "type", 3, "must be a string, not an integer"),
    ("webServer", "flavor", 2, "must be a string"),
    ("webServer", "availabilityZone", True, "must be a string"),
    ("webServer", "keyPair", [], "must be a string"),
    ("webServer", "created", 2013, "must be a string"),
    ("webServer", "osImage", 5, "must be a string or an object, not an integer"),
    ("webServer", "osImage", "", "must not be empty"),
    ("webServer", "dependsOn", "other", "must be a list, not a string"),
]


@pytest.mark.parametrize("kind,name,value,message", WRONG_TYPES)
@BOTH
def test_wrong_type_is_named(kind, name, value, message, validate):
    error = error_of(validate, example(kind, **{name: value}))
    assert error.field == name
    assert message in error.message


@pytest.mark.parametrize("kind,change,path,message", [
    ("activeDirectory", lambda s: s["units"][0].update(isMaster=1), "units[0].isMaster",
     "must be a boolean, not an integer"),
    ("activeDirectory", lambda s: s["units"][1].update(isMaster="false"), "units[1].isMaster",
     "must be a boolean, not a string"),
    ("activeDirectory", lambda s: s["units"][1].update(recoveryPassword=None),
     "units[1].recoveryPassword", "must be a string, not null"),
    ("activeDirectory", lambda s: s["units"][1].update(recoveryPassword=""),
     "units[1].recoveryPassword", "must not be empty"),
    ("msSqlClusterServer", lambda s: s["units"][1].update(isSync="yes"), "units[1].isSync",
     "must be a boolean"),
    ("webServer", lambda s: s["units"][0].update(id=5), "units[0].id", "must be a string"),
    ("webServer", lambda s: s["units"][0].update(location=1), "units[0].location",
     "must be a string"),
    ("webServer", lambda s: s["units"][0].update(name=""), "units[0].name", "must not be empty"),
    ("webServer", lambda s: s["units"].append({"id": "u1"}) or s["units"].append({"id": "u1"}),
     "units[2].id", "duplicate unit id 'u1'"),
    ("linuxWebServer", lambda s: s.update(osImage={"type": "linux"}), "osImage.name",
     "required"),
    ("linuxWebServer", lambda s: s.update(osImage={"name": 5}), "osImage.name",
     "must be a string, not an integer"),
    ("linuxWebServer", lambda s: s.update(osImage={"name": " "}), "osImage.name",
     "must not be empty"),
    ("linuxWebServer", lambda s: s.update(osImage={"name": "deb", "type": None}),
     "osImage.type", "must be a string, not null"),
    ("msSqlClusterServer", lambda s: s.update(databases=["a", 1]), "databases[1]",
     "must be a string, not an integer"),
    ("msSqlClusterServer", lambda s: s.update(databases=["a", ""]), "databases[1]",
     "must not be empty"),
    ("msSqlClusterServer", lambda s: s.update(databases=["a", "b", "a"]), "databases[2]",
     "duplicate"),
    ("webServer", lambda s: s.update(dependsOn=["svc1", None]), "dependsOn[1]",
     "must be a string, not null"),
])
@BOTH
def test_nested_errors_are_named_with_path(kind, change, path, message, validate):
    service = examples()[kind]
    change(service)
    error = error_of(validate, service)
    assert error.field == path
    assert message in error.message


# -- unknown fields and types -------------------------------------------------------------

@pytest.mark.parametrize("kind,change,path", [
    ("webServer", lambda s: s.update(adminPasword="typo"), "adminPasword"),
    ("activeDirectory", lambda s: s.update(dnsForwarders=["8.8.8.8"]), "dnsForwarders"),
    ("msSqlServer", lambda s: s.update(loadBalancerPort=80), "loadBalancerPort"),
    ("webServer", lambda s: s.update(state={}), "state"),
    ("webServer", lambda s: s["units"][0].update(isMaster=True), "units[0].isMaster"),
    ("activeDirectory", lambda s: s["units"][1].update(size="big"), "units[1].size"),
    ("activeDirectory", lambda s: s["units"][0].update(temp={}), "units[0].temp"),
])
def test_unknown_field_is_rejected_on_create_and_allowed_on_update(kind, change, path):
    service = examples()[kind]
    change(service)
    error = error_of(validate_create, service)
    assert error.field == path
    assert "unknown field" in error.message
    validate_update(service)


@BOTH
def test_managed_keys_allowed_anywhere_on_update(validate):
    service = example("webServer", id="s1", created=NOW, updated=NOW)
    service["units"][0].update(id="u1")
    validate(service)  # the always-allowed ones are fine on create too
    service.update(state={"x": 1}, temp={"y": [1]})
    service["units"][0].update(state={}, temp={}, created=NOW, updated=NOW)
    if validate is validate_update:
        validate(service)
    else:
        assert error_of(validate, service).field == "state"


@pytest.mark.parametrize("value,message", [
    ("mySqlServer", "unknown service type 'mySqlServer' (known: activeDirectory, "),
    ("", "unknown service type ''"),
])
@BOTH
def test_unknown_type_is_named(value, message, validate):
    error = error_of(validate, example("webServer", type=value))
    assert error.field == "type"
    assert error.message.startswith(message)
    assert "webServer" in error.message


@pytest.mark.parametrize("body", [None, [], "webServer", 3])
@BOTH
def test_service_must_be_an_object(body, validate):
    error = error_of(validate, body)
    assert error.field == "service" and "JSON object" in error.message


# -- units ----------------------------------------------------------------------------------

@pytest.mark.parametrize("units,path,message", [
    ([], "units", "at least one unit"),
    ({}, "units", "must be a list of unit objects, not an object"),
    ("unit", "units", "not a string"),
    (None, "units", "not null"),
    ([{}, "unit"], "units[1]", "must be a unit object, not a string"),
    ([None], "units[0]", "not null"),
    ([{}, {}, []], "units[2]", "not a list"),
])
@BOTH
def test_units_must_be_a_nonempty_list_of_objects(units, path, message, validate):
    error = error_of(validate, example("webServer", units=units))
    assert error.field == path
    assert message in error.message


@pytest.mark.parametrize("masters", [[], [0, 1], [0, 1, 2]])
@pytest.mark.parametrize("kind", ["activeDirectory", "msSqlClusterServer"])
@BOTH
def test_exactly_one_master(kind, masters, validate):
    service = examples()[kind]
    while len(service["units"]) < 3:
        service["units"].append(copy.deepcopy(service["units"][-1]))
    for index, unit in enumerate(service["units"]):
        unit["isMaster"] = index in masters
    error = error_of(validate, service)
    assert error.field == "units"
    assert "exactly one unit must have isMaster true" in error.message


@pytest.mark.parametrize("master", [0, 1])
def test_master_may_be_any_unit(master):
    service = examples()["activeDirectory"]
    for index, unit in enumerate(service["units"]):
        unit["isMaster"] = index == master
    validate_create(service)
    service["units"] = [service["units"][master]]  # a single DC
    validate_create(service)


@BOTH
def test_cluster_needs_two_units(validate):
    service = examples()["msSqlClusterServer"]
    service["units"] = [{"isMaster": True}]
    error = error_of(validate, service)
    assert error.field == "units" and "at least 2 units" in error.message


@pytest.mark.parametrize("kind", ["msSqlServer", "msSqlClusterServer"])
@pytest.mark.parametrize("password", ["missing", None, "", "  "])
@BOTH
def test_sa_password_required_in_mixed_mode(kind, password, validate):
    service = example(kind, mixedModeAuth=True)
    service.pop("saPassword", None)
    if password != "missing":
        service["saPassword"] = password
    error = error_of(validate, service)
    assert error.field == "saPassword"
    service["mixedModeAuth"] = False
    validate(service)


# -- unitNamingPattern -----------------------------------------------------------------------

@pytest.mark.parametrize("pattern", [
    "web#", "ad#-loc", "#web", "web", "Web-01-#", "a" * 60 + "#", "a" * 63, "x#y",
])
@BOTH
def test_naming_pattern_accepted(pattern, validate):
    validate(example("webServer", unitNamingPattern=pattern))


@pytest.mark.parametrize("pattern,message", [
    ("a##", "only once"),
    ("a#b#", "only once"),
    ("", "must not be empty"),
    ("bad name#", "' '"),
    ("x_#", "'_'"),
    ("web.#", "'.'"),
    ("a" * 64, "too long"),
    ("a" * 61 + "#", "too long"),
    ("-web#", "start or end with '-'"),
    ("web#-", "start or end with '-'"),
    ("#", "letter"),
    ("12#", "letter"),
    (5, "must be a string"),
    (["web#"], "must be a string"),
])
@BOTH
def test_naming_pattern_rejected(pattern, message, validate):
    error = error_of(validate, example("webServer", unitNamingPattern=pattern))
    assert error.field == "unitNamingPattern"
    assert message in error.message


# -- prepare_new / prepare_units ----------------------------------------------------------------

def test_prepare_new_generates_ids_names_and_dates():
    service = examples()["webServerFarm"]
    before = copy.deepcopy(service)
    stored = prepare_new(service, NOW, [])
    assert service == before  # the input is left alone
    assert HEX32.fullmatch(stored["id"])
    assert (stored["created"], stored["updated"]) == (NOW, NOW)
    assert [u["name"] for u in stored["units"]] == ["farm_instance_0", "farm_instance_1"]
    ids = [u["id"] for u in stored["units"]]
    assert all(HEX32.fullmatch(i) for i in ids) and len(set(ids + [stored["id"]])) == 3
    validate_update(stored)


def test_prepare_new_frontend_example():
    stored = prepare_new(examples()["webServer"], NOW, [])
    assert stored["units"][0]["name"] == "frontend_instance_0"
    assert stored["units"][0]["location"] == "west-dc"


def test_prepare_new_keeps_given_ids_and_names():
    service = example("linuxWebServer", id="web00001")
    service["units"].append({})
    stored = prepare_new(service, NOW, [{"id": "other", "units": [{"id": "u9"}]}])
    assert stored["id"] == "web00001"
    assert stored["units"][0]["id"] == "unit0001"
    assert stored["units"][0]["name"] == "site_instance_0"
    assert stored["units"][1]["name"] == "site_b"
    assert HEX32.fullmatch(stored["units"][1]["id"])
    assert stored["units"][2]["name"] == "site_instance_2"


def test_prepare_new_overwrites_client_dates():
    stored = prepare_new(example("webServer", created="1999-01-01", updated="1999-01-01"),
                         NOW, [])
    assert (stored["created"], stored["updated"]) == (NOW, NOW)


def test_prepare_new_generated_names_do_not_clash_with_given_ones():
    service = example("webServer", units=[{"name": "frontend_instance_1"}, {}, {}])
    stored = prepare_new(service, NOW, [])
    names = [u["name"] for u in stored["units"]]
    assert names == ["frontend_instance_1", "frontend_instance_2", "frontend_instance_3"]


@pytest.mark.parametrize("existing", [
    [{"id": "svc1", "name": "x", "units": []}],
    [{"id": "a"}, {"id": "b", "units": [{"id": "svc1"}]}],  # ids are unique model-wide
])
def test_prepare_new_rejects_clashing_service_id(existing):
    error = error_of(lambda s: prepare_new(s, NOW, existing), example("webServer", id="svc1"))
    assert error.field == "id" and "svc1" in error.message


def test_prepare_new_rejects_clashing_unit_id():
    existing = [{"id": "svc1", "units": [{"id": "u1"}]}]
    service = example("webServer", id="svc2", units=[{"id": "u0"}, {"id": "u1"}])
    error = error_of(lambda s: prepare_new(s, NOW, existing), service)
    assert error.field == "units[1].id"
    service = example("webServer", id="svc2", units=[{"id": "svc2"}])
    assert error_of(lambda s: prepare_new(s, NOW, []), service).field == "units[0].id"


def test_prepare_units_fills_only_new_units():
    stored = prepare_new(example("webServer", units=[{}, {}, {}]), NOW, [])
    del stored["units"][1]  # frontend_instance_1 removed earlier
    stored["units"].append({"location": "east"})
    before = copy.deepcopy(stored)
    updated = prepare_units(stored)
    assert stored == before
    assert updated["units"][:2] == before["units"][:2]
    new = updated["units"][2]
    assert new["location"] == "east" and HEX32.fullmatch(new["id"])
    assert new["name"] == "frontend_instance_3"  # _2 is still taken
    assert updated["created"] == NOW


# -- secrets --------------------------------------------------------------------------------------

def stored_ad() -> dict:
    service = example("activeDirectory", id="ad1")
    service["units"][0]["id"] = "u1"
    service["units"][1]["id"] = "u2"
    service["settings"] = {"dns": {"forwarderPassword": "Fwd!1"}, "zones": ["a"]}
    return prepare_new(service, NOW, [])


def test_masked_view_masks_every_password():
    service = example("msSqlServer")
    service["units"] = [{"id": "u1", "recoveryPassword": "R3c!"}]
    service["extra"] = {"list": [{"domainAdminPassword": "D!1", "user": "admin"}],
                        "emptyPassword": None}
    before = copy.deepcopy(service)
    view = masked_view(service)
    assert service == before
    assert view["adminPassword"] == view["saPassword"] == MASK
    assert view["units"][0]["recoveryPassword"] == MASK
    assert view["extra"]["list"][0] == {"domainAdminPassword": MASK, "user": "admin"}
    assert view["extra"]["emptyPassword"] is None
    assert view["name"] == "db" and view["mixedModeAuth"] is True
    assert MASK not in repr({k: v for k, v in view.items()
                             if k not in ("adminPassword", "saPassword", "units", "extra")})


def test_keep_secrets_restores_masked_passwords():
    stored = stored_ad()
    edited = masked_view(stored)
    edited["name"] = "acme.renamed"
    restored = keep_secrets(edited, stored)
    assert restored["adminPassword"] == "Adm1n!Pass"
    assert [u["recoveryPassword"] for u in restored["units"]] == ["R3cover!1", "R3cover!2"]
    assert restored["settings"]["dns"]["forwarderPassword"] == "Fwd!1"
    assert restored["name"] == "acme.renamed"
    assert keep_secrets(masked_view(stored), stored) == stored


def test_keep_secrets_matches_units_by_id_when_reordered():
    stored = stored_ad()
    edited = masked_view(stored)
    edited["units"].reverse()
    restored = keep_secrets(edited, stored)
    assert [(u["id"], u["recoveryPassword"]) for u in restored["units"]] == [
        ("u2", "R3cover!2"), ("u1", "R3cover!1")]


def test_keep_secrets_keeps_new_real_passwords():
    stored = stored_ad()
    edited = masked_view(stored)
    edited["adminPassword"] = "N3w!Pass"
    edited["units"][1]["recoveryPassword"] = "N3w!Rec"
    edited["units"].append({"id": "u3", "isMaster": False, "recoveryPassword": "Fresh!1"})
    before = copy.deepcopy(edited)
    restored = keep_secrets(edited, stored)
    assert edited == before  # not modified in place
    assert restored["adminPassword"] == "N3w!Pass"
    assert [u["recoveryPassword"] for u in restored["units"]] == [
        "R3cover!1", "N3w!Rec", "Fresh!1"]


def test_keep_secrets_does_not_borrow_from_another_unit():
    stored = stored_ad()
    edited = masked_view(stored)
    edited["units"] = [{"id": "u9", "isMaster": True, "recoveryPassword": MASK}]
    assert keep_secrets(edited, stored)["units"][0]["recoveryPassword"] == MASK


def test_keep_secrets_matches_items_without_id_by_index():
    old = {"accounts": [{"user": "a", "password": "pa"}, {"user": "b", "password": "pb"}]}
    new = {"accounts": [{"user": "a2", "password": MASK}, {"user": "b", "password": "new"},
                        {"user": "c", "password": MASK}]}
    assert keep_secrets(new, old) == {"accounts": [
        {"user": "a2", "password": "pa"}, {"user": "b", "password": "new"},
        {"user": "c", "password": MASK}]}


def test_keep_secrets_only_touches_secret_fields():
    old = {"name": "real", "adminPassword": None, "note": "n"}
    new = {"name": MASK, "adminPassword": MASK, "note": MASK}
    assert keep_secrets(new, old) == new
    assert keep_secrets(new, None) == new
    assert keep_secrets("x", {"a": 1}) == "x"


@pytest.mark.parametrize("schema, value", [
    ({"type": "string", "pattern": "^k-[0-9]+$"}, "hunter2-the-key"),
    ({"type": "string", "enum": ["k-1", "k-2"]}, "hunter2-the-key"),
    ({"type": "string", "format": "ipv4"}, "hunter2-the-key"),
    ({"type": "string", "x-check": "url-path"}, "hunter2 the key"),
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True},
     ["hunter2-the-key", "hunter2-the-key"]),
    ({"type": "object", "properties": {"pin": {"type": "string", "pattern": "^[0-9]+$"}}},
     {"pin": "hunter2-the-key"})])
def test_the_error_of_a_secret_value_says_what_is_wrong_without_quoting_it(schema, value):
    """A writeOnly field's (or one named like a password) value is never quoted;
    the same value of an ordinary field is."""
    with pytest.raises(SpecError) as plain:
        check_value(schema, value, "field")
    for secret_schema, secret in (({**schema, "writeOnly": True}, False), (schema, True)):
        with pytest.raises(SpecError) as hidden:
            check_value(secret_schema, value, "field", secret=secret)
        assert "hunter2" not in str(hidden.value)
        assert hidden.value.field == plain.value.field
        said = str(plain.value).split(" (got ")[0].split("'")[0]   # what is wrong
        assert str(hidden.value).startswith(said)


def test_a_nested_write_only_property_is_a_declared_secret():
    from fornace.common.catalog import builtin_catalog, catalog_with as joined

    catalog = joined(builtin_catalog(), {"vault": {"extends": "linuxService", "schema": {
        "properties": {"access": {"type": "object", "properties": {
            "pin": {"type": "string", "writeOnly": True},
            "keys": {"type": "array", "items": {"type": "object", "properties": {
                "seed": {"type": "string", "writeOnly": True}}}}}}}}}})
    assert {"pin", "seed"} <= catalog.secret_fields
    view = masked_view({"type": "vault", "access": {"pin": "1234", "keys": [{"seed": "s33d"}]}},
                       catalog)
    assert view["access"] == {"pin": MASK, "keys": [{"seed": MASK}]}
