"""Who the conductor is to Heat: a trust, a user's token or service credentials,
with Heat's endpoint taken from the token's catalog -- against the real Keystone
of keystone-up (Heat of heat-up in its catalog) and the real Heat."""
from __future__ import annotations

import uuid

import pytest
from oslo_config import cfg

import identitykit
from fornace.common import identity
from fornace.common.identity import Keystone
from fornace.conductor import config
from fornace.conductor.executors.base import StackRequest
from fornace.conductor.executors.heat import HeatStacks
from services import heat_url, import_or_require

import_or_require("heatclient.client")
NONE = {"n": {"Type": "OS::Heat::None"}}


def make_conf(**heat_values) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    config.register(conf)
    conf([])
    identity.ensure(conf, "heat")   # registered when first read
    for key, value in {"poll_start": 0.1, "poll_max": 0.5, "stack_timeout": 60.0,
                       **heat_values}.items():
        conf.set_override(key, value, group="heat")
    return conf


def round_trip(stacks: HeatStacks) -> None:
    """A stack made and deleted through ``stacks``: Heat took its calls."""
    name = f"fi-{uuid.uuid4().hex[:10]}"
    try:
        assert stacks.apply(StackRequest(name, {"Resources": NONE}, {})) == {}
        assert stacks.describe(name).endswith("CREATE_COMPLETE")
    finally:
        stacks.delete(name)
    assert stacks.describe(name) == "gone"


@pytest.fixture
def alice():
    heat_url()
    return identitykit.login("alice")


def test_a_trust_acts_for_its_user_on_the_heat_of_the_catalog(alice):
    conf = make_conf()
    identitykit.set_keystone_options(conf)
    keystone = Keystone.from_config(conf)
    trust = keystone.create_trust(alice.token, alice.user_id, alice.project_id,
                                  ["member"])
    try:
        stacks = HeatStacks.from_config(conf, tenant_id=alice.project_id, trust_id=trust)
        session = stacks.client.http_client.session
        access = session.auth.get_access(session)
        # a trust-scoped token, impersonating the trustor on the trust's project
        assert (access.trust_id, access.user_id, access.project_id) == \
            (trust, alice.user_id, alice.project_id)
        assert stacks.client.http_client.endpoint_override == \
            heat_url().rsplit("/v1/", 1)[0] + f"/v1/{alice.project_id}"
        round_trip(stacks)
    finally:
        assert keystone.delete_trust(trust)
    assert not identitykit.trust_exists(trust)
    assert keystone.delete_trust(trust) is False   # gone already: no error


def test_a_deleted_trust_is_a_clear_error(alice):
    conf = make_conf()
    identitykit.set_keystone_options(conf)
    keystone = Keystone.from_config(conf)
    trust = keystone.create_trust(alice.token, alice.user_id, alice.project_id, ["member"])
    keystone.delete_trust(trust)
    with pytest.raises(ValueError, match="cannot find Heat in the Keystone catalog"):
        HeatStacks.from_config(conf, tenant_id=alice.project_id, trust_id=trust)


def test_a_trust_needs_the_service_user_in_the_conductor(alice):
    with pytest.raises(ValueError, match=r"no \[keystone_authtoken\] service user"):
        HeatStacks.from_config(make_conf(), tenant_id=alice.project_id, trust_id="t1")


def test_a_users_token_without_a_trust(alice):
    conf = make_conf()
    identitykit.set_keystone_options(conf)
    stacks = HeatStacks.from_config(conf, token=alice.token, tenant_id=alice.project_id)
    assert stacks.client.http_client.endpoint_override.endswith(f"/v1/{alice.project_id}")
    round_trip(stacks)


def test_heat_service_credentials_through_keystoneauth_loading():
    heat_url()
    conf = make_conf(auth_type="password")
    identity.plugin_options(conf, "heat")
    root = identitykit.keystone_url().rstrip("/").removesuffix("/v3")
    for key, value in {"auth_url": root, "username": "fornace",
                       "password": "fornace-secret", "project_name": "service",
                       "user_domain_name": "Default",
                       "project_domain_name": "Default"}.items():
        conf.set_override(key, value, group="heat")
    stacks = HeatStacks.from_config(conf)
    service = identitykit.login("fornace")
    assert stacks.client.http_client.endpoint_override.endswith(f"/v1/{service.project_id}")
    round_trip(stacks)


def test_heat_tls_options_come_from_keystoneauth():
    names = {opt.dest for opt in dict(config.list_opts())["heat"]}
    assert {"cafile", "insecure", "certfile", "auth_type", "auth_url", "username",
            "password", "url", "stack_timeout"} <= names
    assert [o for o in dict(config.list_opts())["heat"] if o.dest == "password"][0].secret


def test_an_environment_s_region_picks_the_heat_of_that_region(alice):
    """The task's model names the region its environment was created in (the
    API's ``region``): the Heat of that region of the catalog, whatever
    ``[heat] region_name`` says; a region without Heat is a clear error."""
    from fornace.common import contract
    conf = make_conf(region_name="NoSuchRegion")
    identitykit.set_keystone_options(conf)
    factory = HeatStacks.factory(conf)

    def task(region):
        return contract.parse_task(contract.task_body(
            {"id": "e1", "name": "e", "services": []}, alice.token, alice.project_id,
            region=region))
    round_trip(factory(task("RegionOne")))
    with pytest.raises(ValueError, match="cannot find Heat in the Keystone catalog: .* "
                                         "orchestration service in Elsewhere region"):
        factory(task("Elsewhere"))
    with pytest.raises(ValueError, match="orchestration service in NoSuchRegion region"):
        factory(task(None))   # none given: [heat] region_name
