"""The API's access rules (fornace.api.policy, oslo.policy), for the JSON API
and the dashboard alike.

First with callers the tests choose (an authenticator whose tokens name
contexts of chosen roles and projects) and in noauth mode; then against the
real Keystone of keystone-up (``identitykit``): its seeded users, and users a
test makes for itself (an admin of demo-b, a reader of demo-a) and deletes.
"""
from __future__ import annotations

import inspect
import os
import re
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from oslo_config import cfg
from oslo_policy import policy as oslo_policy

import identitykit
from apikit import Api, ChosenCallers, Published, make_api
from fornace.api import deadletterroutes, jobroutes, muranoroutes, policy
from fornace.api.packages import routes as packageroutes
from fornace.api.app import create_app
from fornace.api.auth import KeystoneAuth
from fornace.api.stores.jobs import Jobs
from fornace.api.server import ApiService
from fornace.api.context import Context
from fornace.api.stores.store import Store
from fornace.cli.main import build_conf
from fornace.common.db.engine import make_engine, session_factory, upgrade
from test_dashboard import Browser, create_env, deployed_env, site_form

SITE = {"name": "site", "type": "linuxWebServer", "port": 8080, "unitNamingPattern": "web#",
        "osImage": {"name": "local", "type": "linux"}, "units": [{}]}

# -- callers the tests choose ----------------------------------------------------------------

CALLERS = {
    "mia": Context("p-a", "u-mia", roles=frozenset({"member", "reader"}), user_name="mia",
                   project_name="demo-a", project_domain_id="default"),
    "rita": Context("p-a", "u-rita", roles=frozenset({"reader"}), user_name="rita",
                    project_name="demo-a", project_domain_id="default"),
    "bea": Context("p-b", "u-bea", roles=frozenset({"member", "reader"}), user_name="bea",
                   project_name="demo-b", project_domain_id="default"),
    # the admin role, but on an ordinary project: no reach outside it
    "pam": Context("p-b", "u-pam", roles=frozenset({"admin", "member", "reader"}),
                   user_name="pam", project_name="demo-b", project_domain_id="default"),
    # a project named admin in another domain is not the bootstrap one
    "dom": Context("p-x", "u-dom", roles=frozenset({"admin", "member", "reader"}),
                   user_name="dom", project_name="admin", project_domain_id="elsewhere"),
    "root": Context("p-admin", "u-root", roles=frozenset({"admin", "member", "reader"}),
                    user_name="root", project_name="admin", project_domain_id="default",
                    is_admin=False),
}


class Chosen(ChosenCallers):
    """An authenticator whose tokens are the names of :data:`CALLERS`."""

    def __init__(self) -> None:
        super().__init__(CALLERS)


def chosen_api(tmp_path, enforcer: oslo_policy.Enforcer | None = None) -> Api:
    url = f"sqlite:///{tmp_path / 'policy.sqlite'}"
    upgrade(url)
    published = Published()
    store = Store(session_factory(make_engine(url)), published)
    jobs = Jobs(store)
    app = create_app(store, Chosen(), jobs=jobs, enforcer=enforcer)
    return Api(TestClient(app, raise_server_exceptions=False), store, published, jobs)


def as_(name: str) -> dict[str, str]:
    return {"X-Auth-Token": name}


def refused(response: Any, action: str) -> None:
    """A 403 of the JSON API naming the policy rule that refused it."""
    assert response.status_code == 403, (response.status_code, response.text)
    assert response.json()["error"]["message"].startswith(f"{action} is not allowed"), \
        response.text


def new_env(client: TestClient, caller: str, name: str = "env") -> str:
    created = client.post("/environments", json={"name": name}, headers=as_(caller))
    assert created.status_code == 200, created.text
    return created.json()["id"]


def env_with_session(client: TestClient, caller: str, name: str = "env") -> tuple[str, str]:
    """An environment with one service in an open session of ``caller``."""
    env_id = new_env(client, caller, name)
    session = client.post(f"/environments/{env_id}/configure", headers=as_(caller)).json()["id"]
    added = client.post(f"/environments/{env_id}/services", json=SITE,
                        headers={**as_(caller), "X-Configuration-Session": session})
    assert added.status_code == 200, added.text
    return env_id, session


@pytest.fixture
def chosen(tmp_path) -> Api:
    return chosen_api(tmp_path)


# -- the rules --------------------------------------------------------------------------------

def test_the_rules_and_their_defaults():
    rules = {rule.name: rule for rule in policy.list_rules()}
    assert rules["cloud_admin"].check_str == \
        "role:admin and project_domain_id:default and project_name:admin"
    assert rules["owner"].check_str == "project_id:%(project_id)s"
    assert rules["reader"].check_str == "rule:cloud_admin or rule:owner"
    assert rules["writer"].check_str == \
        "rule:cloud_admin or (rule:owner and (role:member or role:admin))"
    admin_only = {"environment:list_all_tenants", "package:transfer", "dead_letter:list"}
    for name in admin_only:
        assert rules[name].check_str == "rule:cloud_admin", name
    for rule in policy.API_RULES:
        assert isinstance(rule, oslo_policy.DocumentedRuleDefault) and rule.description
        if rule.name in admin_only:
            continue
        reads = {op["method"] for op in rule.operations} == {"GET"}
        assert rule.check_str == ("rule:reader" if reads else "rule:writer"), rule.name


def _route_rules() -> dict[tuple[str, str], str]:
    """(method, path) -> the rule each JSON route checks (its ``permitted`` dependency)."""
    found = {}
    for route in (muranoroutes.router.routes + jobroutes.router.routes
                  + packageroutes.router.routes + deadletterroutes.router.routes):
        assert isinstance(route, APIRoute)
        checks = [d.call for d in route.dependant.dependencies
                  if d.call.__name__ == "permitted_caller"]
        assert len(checks) == 1, f"{route.path} checks no policy rule"
        action = inspect.getclosurevars(checks[0]).nonlocals["action"]
        for method in route.methods:
            found[(method, route.path.replace(":path}", "}"))] = action
    return found


def _any_ids(path: str) -> str:
    return re.sub(r"\{[^}]*id\}", "{id}", path)


def test_every_route_checks_the_rule_that_documents_it():
    """The sample policy's operations are the routes that check each rule."""
    documented = {(op["method"], _any_ids(op["path"])): rule.name for rule in policy.API_RULES
                  for op in rule.operations if "?" not in op["path"]}
    checked = {(method, _any_ids(path)): action
               for (method, path), action in _route_rules().items()}
    assert checked == documented


def test_an_unregistered_rule_is_a_mistake_not_a_refusal():
    with pytest.raises(oslo_policy.PolicyNotRegistered,
                       match="environment:nap has not been registered"):
        policy.Policy(policy.enforcer()).allows(CALLERS["mia"], "environment:nap")


def test_is_admin_is_what_the_policy_says():
    rules = policy.Policy(policy.enforcer())
    assert rules.with_admin(CALLERS["root"]).is_admin
    for name in ("mia", "rita", "pam", "dom"):
        assert not rules.with_admin(CALLERS[name]).is_admin, name
    # a context claiming it is no admin of anything
    claimed = Context("p-a", "u", roles=frozenset({"member"}), is_admin=True)
    assert not rules.with_admin(claimed).is_admin


# -- noauth: as before, every caller a member of their header's project ----------------------

def test_noauth_callers_are_members_of_their_own_project_only(tmp_path):
    api = make_api(f"sqlite:///{tmp_path / 'noauth.sqlite'}")
    client = api.client
    ctx = client.app.state.auth.context({"x-tenant-id": "t1"})
    assert ctx.roles == frozenset({"member"}) and not ctx.is_admin
    env_id, session = env_with_session(client, "ignored")   # the default tenant t1
    assert client.post(f"/environments/{env_id}/sessions/{session}/deploy").status_code == 200
    assert client.get(f"/environments/{env_id}").status_code == 200
    assert [e["id"] for e in client.get("/environments?tenant=t1").json()["environments"]] \
        == [env_id]
    other = api.as_tenant("t2")
    denied = client.get(f"/environments/{env_id}", headers=other)
    assert denied.status_code == 403
    assert "not authorized to access environment" in denied.json()["error"]["message"]
    assert client.get("/environments", headers=other).json() == {"environments": []}
    refused(client.get("/environments?all_tenants=true", headers=other),
            "environment:list_all_tenants")
    refused(client.get("/environments?tenant=t1", headers=other),
            "environment:list_all_tenants")
    assert client.delete(f"/environments/{env_id}", headers=other).status_code == 403


# -- chosen roles --------------------------------------------------------------------------------

def test_a_reader_may_look_but_not_change(chosen):
    client = chosen.client
    env_id, session = env_with_session(client, "mia")
    reads = ["/environments", f"/environments/{env_id}", f"/environments/{env_id}/services",
             f"/environments/{env_id}/lastStatus", f"/environments/{env_id}/deployments",
             "/deployments", f"/environments/{env_id}/jobs", f"/environments/{env_id}/topology",
             f"/environments/{env_id}/status", f"/environments/{env_id}/outputs",
             f"/environments/{env_id}/tasks.tsv"]
    for path in reads:
        assert client.get(path, headers=as_("rita")).status_code == 200, path
    assert [e["id"] for e in client.get("/environments", headers=as_("rita"))
            .json()["environments"]] == [env_id]
    writes = [("POST", "/environments", {"name": "mine"}, "environment:create"),
              ("PUT", f"/environments/{env_id}", {"name": "new"}, "environment:update"),
              ("DELETE", f"/environments/{env_id}", None, "environment:delete"),
              ("POST", f"/environments/{env_id}/configure", None, "session:configure"),
              ("POST", f"/environments/{env_id}/services", SITE, "service:create"),
              ("PUT", f"/environments/{env_id}/services", [SITE], "service:update"),
              ("DELETE", f"/environments/{env_id}/services/site", None, "service:delete"),
              ("POST", f"/environments/{env_id}/sessions/{session}/deploy", None,
               "session:deploy"),
              ("DELETE", f"/environments/{env_id}/sessions/{session}", None, "session:delete"),
              ("POST", f"/environments/{env_id}/actions/check", {}, "job:run_action"),
              ("POST", f"/environments/{env_id}/abandon", None, "job:abandon")]
    for method, path, body, action in writes:
        refused(client.request(method, path, json=body,
                               headers={**as_("rita"), "X-Configuration-Session": session}),
                action)
    # the member may do all of it
    assert client.put(f"/environments/{env_id}", json={"name": "new"},
                      headers=as_("mia")).status_code == 200
    assert client.post(f"/environments/{env_id}/sessions/{session}/deploy",
                       headers=as_("mia")).status_code == 200


def test_other_projects_are_for_the_cloud_admin_alone(chosen):
    client = chosen.client
    env_a = new_env(client, "mia", "a-env")
    env_b = new_env(client, "bea", "b-env")
    for name in ("bea", "pam", "dom"):
        shown = client.get(f"/environments/{env_a}", headers=as_(name))
        assert shown.status_code == 403, name
        assert "not authorized to access environment" in shown.json()["error"]["message"]
        assert client.delete(f"/environments/{env_a}", headers=as_(name)).status_code == 403
        refused(client.get("/environments?all_tenants=true", headers=as_(name)),
                "environment:list_all_tenants")
        refused(client.get("/environments?tenant=p-a", headers=as_(name)),
                "environment:list_all_tenants")
    # an admin of demo-b is a writer there, as a member is
    assert client.put(f"/environments/{env_b}", json={"name": "b-env2"},
                      headers=as_("pam")).status_code == 200

    root = as_("root")
    assert client.get(f"/environments/{env_a}", headers=root).json()["tenant_id"] == "p-a"
    every = client.get("/environments?all_tenants=true", headers=root).json()["environments"]
    assert {e["id"]: e["tenant_id"] for e in every} == {env_a: "p-a", env_b: "p-b"}
    only_a = client.get("/environments?tenant=p-a", headers=root).json()["environments"]
    assert [e["id"] for e in only_a] == [env_a]
    assert client.get("/environments", headers=root).json() == {"environments": []}
    session = client.post(f"/environments/{env_a}/configure", headers=root).json()["id"]
    assert client.post(f"/environments/{env_a}/services", json=SITE,
                       headers={**root, "X-Configuration-Session": session}).status_code == 200
    assert client.get(f"/environments/{env_a}/jobs", headers=root).status_code == 200
    assert client.delete(f"/environments/{env_b}", headers=root).status_code == 200
    assert client.get(f"/environments/{env_b}", headers=as_("bea")).status_code == 404


def _policy_file(tmp_path, rules: dict[str, str]) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text("".join(f'"{name}": "{check}"\n' for name, check in rules.items()))
    return path


def policy_conf(tmp_path, rules: dict[str, str]) -> cfg.ConfigOpts:
    """A configuration whose ``[oslo_policy] policy_file`` (a name, found beside
    the configuration file as oslo.policy looks for it) holds ``rules``."""
    _policy_file(tmp_path, rules)
    (tmp_path / "fornace.conf").write_text("[oslo_policy]\npolicy_file = policy.yaml\n")
    conf = cfg.ConfigOpts()
    conf(["--config-file", str(tmp_path / "fornace.conf")], default_config_files=[])
    return conf


def test_a_custom_policy_redefines_the_cloud_admin(tmp_path):
    api = chosen_api(tmp_path, policy.enforcer(policy_conf(tmp_path,
                                                           {"cloud_admin": "role:admin"})))
    env_a = new_env(api.client, "mia")
    assert api.client.get(f"/environments/{env_a}", headers=as_("pam")).status_code == 200
    assert api.client.get(f"/environments/{env_a}", headers=as_("bea")).status_code == 403


def test_a_cloud_admins_call_is_checked_on_the_environments_project(tmp_path):
    """With a policy that only lets a project's own members delete, the cloud
    admin may read another project's environment but not delete it."""
    api = chosen_api(tmp_path, policy.enforcer(policy_conf(
        tmp_path, {"environment:delete": "rule:owner"})))
    env_a = new_env(api.client, "mia")
    assert api.client.get(f"/environments/{env_a}", headers=as_("root")).status_code == 200
    refused(api.client.delete(f"/environments/{env_a}", headers=as_("root")),
            "environment:delete")
    own = new_env(api.client, "root", "root-env")
    assert api.client.delete(f"/environments/{own}", headers=as_("root")).status_code == 200
    assert api.client.delete(f"/environments/{env_a}", headers=as_("mia")).status_code == 200


def test_without_a_configuration_only_the_defaults_count(tmp_path, monkeypatch):
    """create_app's default enforcer reads no policy.yaml lying about."""
    _policy_file(tmp_path, {"environment:list": "!"})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert policy.Policy(policy.enforcer()).allows(CALLERS["mia"], "environment:list")


def test_a_changed_policy_file_counts_once_it_is_read_again(tmp_path):
    now = [0.0]
    rules = policy.Policy(policy.enforcer(policy_conf(tmp_path, {})), recheck_seconds=5,
                          clock=lambda: now[0])
    assert rules.allows(CALLERS["mia"], "environment:delete")
    path = _policy_file(tmp_path, {"environment:delete": "!"})
    later = path.stat().st_mtime + 10        # a newer modification time, whatever the clock
    os.utime(path, (later, later))
    now[0] = 4.0
    assert rules.allows(CALLERS["mia"], "environment:delete")   # not read again yet
    now[0] = 5.0
    assert not rules.allows(CALLERS["mia"], "environment:delete")
    assert rules.allows(CALLERS["mia"], "environment:update")


# -- a policy file of the API service ------------------------------------------------------

@pytest.fixture
def refusing_service(tmp_path) -> Iterator[ApiService]:
    """``fornace api`` whose policy.yaml (beside its config file, as oslo.policy
    looks for it) refuses every environment deletion."""
    (tmp_path / "policy.yaml").write_text('"environment:delete": "!"\n')
    (tmp_path / "fornace.conf").write_text("[broker]\nurl = memory://\n")
    conf = build_conf()
    conf(["--config-file", str(tmp_path / "fornace.conf"), "api"], default_config_files=[])
    service = ApiService(conf, f"sqlite:///{tmp_path / 'refusing.sqlite'}")
    yield service
    service.stop()


def test_a_policy_file_refuses_a_call_in_the_api_and_the_dashboard(refusing_service):
    client = TestClient(refusing_service.app, raise_server_exceptions=False)
    env_id = new_env(client, "noauth")
    refused(client.delete(f"/environments/{env_id}"), "environment:delete")
    assert client.put(f"/environments/{env_id}", json={"name": "renamed"}).status_code == 200

    browser = Browser(client)
    listing = browser.get("/")
    page = browser.get(f"/environments/{env_id}")
    for shown in (listing, page):
        assert f"/environments/{env_id}/delete" not in shown
    assert f"/environments/{env_id}/services/new" in page        # the rest stays
    posted = browser.post(f"/environments/{env_id}/delete")
    assert posted.status_code == 403 and "environment:delete is not allowed" in posted.text
    browser.get(f"/environments/{env_id}/delete", status=403)
    assert client.get(f"/environments/{env_id}").status_code == 200


# -- the dashboard -------------------------------------------------------------------------

def dashboard_as(api: Api, name: str) -> Browser:
    client = TestClient(api.client.app, raise_server_exceptions=False)
    client.cookies.set("fornace_token", name)
    return Browser(client)


# what a deployed environment's page shows who may change it (no session open)
CHANGES = ("/services/new", "/delete", "/edit", "/actions", '/deploy"')


def test_the_dashboard_shows_a_reader_no_change(chosen):
    mia, rita = dashboard_as(chosen, "mia"), dashboard_as(chosen, "rita")
    env_id = deployed_env(chosen, mia)
    mine = mia.get(f"/environments/{env_id}")
    assert all(change in mine for change in CHANGES)
    assert "create-env" in mia.get("/")

    page = rita.get(f"/environments/{env_id}")
    assert "site" in page and "Topology" in page
    assert not any(change in page for change in CHANGES), page
    assert "may look at this environment but not change it" in page
    listing = rita.get("/")
    assert f"/environments/{env_id}" in listing
    assert "create-env" not in listing and f"/environments/{env_id}/delete" not in listing
    assert 'action="/dashboard/environments/' not in listing     # no deploy button

    for path, data, action in [("/environments", {"name": "x"}, "environment:create"),
                               (f"/environments/{env_id}/delete", {}, "environment:delete"),
                               (f"/environments/{env_id}/deploy", {}, "session:deploy"),
                               (f"/environments/{env_id}/services/new", site_form(),
                                "service:create")]:
        posted = rita.post(path, data)
        assert posted.status_code == 403 and f"{action} is not allowed" in posted.text, path
    for path in (f"/environments/{env_id}/services/new", f"/environments/{env_id}/actions",
                 f"/environments/{env_id}/delete"):
        rita.get(path, status=403)


def test_the_dashboard_shows_every_project_to_the_cloud_admin_alone(chosen):
    mia, bea, root = (dashboard_as(chosen, name) for name in ("mia", "bea", "root"))
    env_a, env_b = create_env(mia, "alpha"), create_env(bea, "beta")
    assert "all_tenants" not in mia.get("/")
    mia.get("/?all_tenants=1", status=403)
    mia.get(f"/environments/{env_b}", status=403)

    assert "?all_tenants=1" in root.get("/")
    every = root.get("/?all_tenants=1")
    assert f"/environments/{env_a}" in every and f"/environments/{env_b}" in every
    assert "<code>p-a</code>" in every and "Environments of every project" in every
    assert "create-env" not in every
    page = root.get(f"/environments/{env_a}")
    assert f"/environments/{env_a}/delete" in page
    assert root.post(f"/environments/{env_a}/delete").status_code == 303
    mia.get(f"/environments/{env_a}", status=404)


# -- the real Keystone -------------------------------------------------------------------------

keystone_conf = identitykit.api_conf


@pytest.fixture
def keystone_api(tmp_path) -> TestClient:
    url = f"sqlite:///{tmp_path / 'ks-policy.sqlite'}"
    upgrade(url)
    store = Store(session_factory(make_engine(url)), Published())
    app = create_app(store, KeystoneAuth.from_config(keystone_conf()), jobs=Jobs(store))
    return TestClient(app, raise_server_exceptions=False)


def _id_of(session: Any, kind: str, name: str) -> str:
    found = identitykit.identity(session, "GET", f"/{kind}?name={name}").json()[kind]
    assert len(found) == 1, found
    return found[0]["id"]


def _token_of(name: str, password: str, project: str) -> str:
    from keystoneauth1 import session
    from keystoneauth1.identity import generic
    return session.Session(auth=generic.Password(
        auth_url=identitykit.keystone_url(), username=name, password=password,
        project_name=project, user_domain_id="default",
        project_domain_id="default")).get_token()


@pytest.fixture
def made_user() -> Iterator[Any]:
    """Makes users of chosen roles on a project (``made_user(prefix, project,
    *roles)`` -> their token); deletes them after the test."""
    admin = identitykit.admin()
    made: list[str] = []

    def make(prefix: str, project: str, *roles: str) -> str:
        name, password = f"{prefix}-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
        created = identitykit.identity(admin, "POST", "/users", json={"user": {
            "name": name, "password": password, "domain_id": "default"}})
        assert created.status_code == 201, created.text
        user_id = created.json()["user"]["id"]
        made.append(user_id)
        project_id = _id_of(admin, "projects", project)
        for role in roles:
            granted = identitykit.identity(
                admin, "PUT",
                f"/projects/{project_id}/users/{user_id}/roles/{_id_of(admin, 'roles', role)}")
            assert granted.status_code == 204, granted.text
        return _token_of(name, password, project)
    yield make
    for user_id in made:
        identitykit.identity(admin, "DELETE", f"/users/{user_id}")


def _ids(response: Any) -> set[str]:
    assert response.status_code == 200, response.text
    return {env["id"] for env in response.json()["environments"]}


def test_keystone_projects_keep_to_themselves_but_for_the_cloud_admin(keystone_api, made_user):
    client = keystone_api
    alice, bob, admin = (identitykit.login(name) for name in ("alice", "bob", "admin"))
    env_a = new_env(client, alice.token, "alice-env")
    env_b = new_env(client, bob.token, "bob-env")

    shown = client.get(f"/environments/{env_b}", headers=as_(alice.token))
    assert shown.status_code == 403
    refused(client.get("/environments?all_tenants=true", headers=as_(alice.token)),
            "environment:list_all_tenants")
    refused(client.get(f"/environments?tenant={bob.project_id}", headers=as_(alice.token)),
            "environment:list_all_tenants")

    assert {env_a, env_b} <= _ids(client.get("/environments?all_tenants=true",
                                             headers=as_(admin.token)))
    assert _ids(client.get(f"/environments?tenant={bob.project_id}",
                           headers=as_(admin.token))) == {env_b}
    assert client.get(f"/environments/{env_b}",
                      headers=as_(admin.token)).json()["name"] == "bob-env"

    # the admin role on demo-b: a writer of demo-b, nothing more
    dave = made_user("dave", "demo-b", "admin")
    assert client.get(f"/environments/{env_a}", headers=as_(dave)).status_code == 403
    refused(client.get("/environments?all_tenants=true", headers=as_(dave)),
            "environment:list_all_tenants")
    assert _ids(client.get("/environments", headers=as_(dave))) == {env_b}
    assert client.put(f"/environments/{env_b}", json={"name": "bob-env2"},
                      headers=as_(dave)).status_code == 200


def test_a_keystone_reader_looks_but_does_not_change(keystone_api, made_user):
    client = keystone_api
    alice = identitykit.login("alice")
    env_a = new_env(client, alice.token, "alice-env")
    reader = made_user("rhea", "demo-a", "reader")
    assert _ids(client.get("/environments", headers=as_(reader))) == {env_a}
    assert client.get(f"/environments/{env_a}", headers=as_(reader)).status_code == 200
    refused(client.post("/environments", json={"name": "r"}, headers=as_(reader)),
            "environment:create")
    refused(client.delete(f"/environments/{env_a}", headers=as_(reader)), "environment:delete")

    browser = Browser(TestClient(client.app, raise_server_exceptions=False))
    browser.client.cookies.set("fornace_token", reader)
    page = browser.get(f"/environments/{env_a}")
    assert "alice-env" in page and not any(change in page for change in CHANGES)
    assert "create-env" not in browser.get("/")
    assert browser.post("/environments", {"name": "r"}).status_code == 403
