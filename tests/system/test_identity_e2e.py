"""OpenStack identity end to end: alice logs in to the dashboard with her password
(Chromium), deploys an environment whose stack goes to the Heat of the Keystone
catalog through a trust, bob does not see it, and deleting it deletes the trust.
Real Keystone (keystone-up, Heat in its catalog), real Heat, the API on a real
port in keystone mode and the conductor in this process (plans answered by the
agent simulator)."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

import identitykit
from serving import serving
from browserkit import chromium
from fornace.api.server import ApiService
from fornace.cli.main import build_conf
from fornace.conductor.config import engine_settings, trust_deleter
from fornace.conductor.daemon import Conductor, ConductorSettings
from fornace.conductor.executors import stacks_factory
from fornace.conductor.executors.heat import HeatStacks
from services import heat_url, import_or_require, keystone_url
from waiting import wait_for

DATA = Path(__file__).resolve().parents[2] / "data"
DEPLOY_MS = 180_000


@pytest.fixture
def fornace(tmp_path):
    """(dashboard URL, API service, conf): keystone mode, stacks on the catalog's Heat."""
    keystone_url()
    heat_url()
    import_or_require("heatclient.client")
    conf = build_conf()
    conf(["api"], default_config_files=[])
    conf.set_override("auth_mode", "keystone", group="api")
    conf.set_override("state_dir", str(tmp_path / "state"), group="api")
    identitykit.set_keystone_options(conf)
    # Heat without Nova: the catalog's instances are placeholders
    conf.set_override("resource_registry", json.dumps({"OS::Nova::Server": "OS::Heat::None"}),
                      group="heat")
    conf.set_override("poll_start", 0.1, group="heat")
    conf.set_override("poll_max", 0.5, group="heat")
    api = ApiService(conf, f"sqlite:///{tmp_path / 'e2e.sqlite'}")
    assert api.start_consumers().ready.wait(10)
    daemon = Conductor(ConductorSettings(broker_url="memory://", data_dir=DATA,
                                         max_environments=1, agents="simulator",
                                         engine=engine_settings(conf),
                                         delete_trust=trust_deleter(conf)),
                       stacks_factory("heat", conf))
    daemon.start()
    assert daemon.wait_ready()
    try:
        with serving(api.app) as url:
            yield url + "/dashboard", api, conf
    finally:
        daemon.shutdown()
        api.stop()


def keystone_login(page, dashboard: str, user: str) -> None:
    password, project = identitykit.USERS[user]
    page.goto(dashboard + "/login")
    page.fill("#in-username", user)
    page.fill("#in-password", password)
    page.fill("#in-project", project)
    page.click("button:has-text('Log in')")
    page.wait_for_selector(".topbar .who")


def test_alice_deploys_through_a_trust_bob_sees_nothing_delete_removes_the_trust(fornace):
    from playwright.sync_api import expect
    dashboard, api, conf = fornace
    alice = identitykit.login("alice")
    trusts_before = {t["id"] for t in identitykit.trusts_of(alice.user_id)}
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        keystone_login(page, dashboard, "alice")
        expect(page.locator(".topbar .who")).to_contain_text("alice")
        page.fill("#in-env-name", name)
        page.click("button:has-text('Create environment')")
        expect(page.locator("h1")).to_contain_text(name)
        env_url = page.url
        env_id = env_url.rstrip("/").rsplit("/", 1)[1]
        page.click("a:has-text('Add service')")
        page.click(".card[data-type=linuxWebServer]")
        page.fill("#in-name", "site")
        page.fill("#in-unitNamingPattern", "web#")
        page.fill("#in-units", "1")
        page.click("#save-service")
        expect(page.locator("#session .changes")).to_contain_text("added: site")
        page.click("#deploy-button")
        expect(page.locator("#env-status")).to_contain_text("ready", timeout=DEPLOY_MS)

        # the stack is on the Heat of alice's project, made through a new trust
        [trust] = [t for t in identitykit.trusts_of(alice.user_id)
                   if t["id"] not in trusts_before]
        assert trust["project_id"] == alice.project_id
        assert trust["trustee_user_id"] == identitykit.login("fornace").user_id
        stacks = HeatStacks.from_config(conf, alice.token, alice.project_id)
        assert stacks.describe(f"e{env_id}").endswith("CREATE_COMPLETE")
        with api.store.sessions() as db:
            from fornace.common.db.models import Environment
            assert db.get(Environment, env_id).trust_id == trust["id"]

        # bob's dashboard and API do not show it
        bob_page = browser.new_context().new_page()
        keystone_login(bob_page, dashboard, "bob")
        expect(bob_page.locator("main")).not_to_contain_text(name)
        assert bob_page.goto(env_url).status == 403
        bob = identitykit.login("bob")
        listed = api.app.state.store.environments.list(
            api.app.state.auth.context({"x-auth-token": bob.token}))
        assert env_id not in [e["id"] for e in listed]

        # alice deletes it: the stack goes, then the trust
        page.goto(env_url)
        page.click("a.btn-danger:has-text('Delete')")
        page.click("#confirm-delete")
        expect(page.locator(".flash-ok")).to_contain_text("Environment deletion started")
        expect(page.locator(f"tr[data-env='{env_id}']")).to_have_count(0, timeout=DEPLOY_MS)
    assert stacks.describe(f"e{env_id}") == "gone"
    wait_for(lambda: not identitykit.trust_exists(trust["id"]), "the trust to be deleted")
