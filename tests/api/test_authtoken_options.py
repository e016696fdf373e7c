"""``[keystone_authtoken]``: keystonemiddleware's option names for the token
validation, and the deprecated ``[keystone]`` still read (with oslo.config's
warning) -- against the real Keystone of keystone-up."""
from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient
from oslo_config import cfg

import identitykit
from apikit import Published, api_conf_file
from fornace.api.app import create_app
from fornace.api.auth import KeystoneAuth
from fornace.api.stores.store import Store
from fornace.common import identity
from fornace.common.db.engine import make_engine, session_factory, upgrade
from services import keystone_url

SERVICE_USER = """auth_type = password
auth_url = {url}
username = fornace
password = {password}
project_name = service
user_domain_name = Default
project_domain_name = Default
"""


def conf_of(tmp_path, text: str) -> cfg.ConfigOpts:
    """The API's options read from a configuration file holding ``text``."""
    return api_conf_file(tmp_path, text)


def service_user() -> str:
    return SERVICE_USER.format(url=keystone_url(), password=identitykit.USERS["fornace"][0])


def api_of(tmp_path, auth: KeystoneAuth) -> TestClient:
    url = f"sqlite:///{tmp_path / 'ks.sqlite'}"
    upgrade(url)
    return TestClient(create_app(Store(session_factory(make_engine(url)), Published()), auth))


def test_keystone_authtoken_validates_tokens_with_its_own_settings(tmp_path):
    conf = conf_of(tmp_path, "[keystone_authtoken]\n" + service_user()
                   + "www_authenticate_uri = https://keystone.example.com/v3\n"
                     "token_cache_time = 17\ninterface = public\nregion_name = RegionOne\n"
                     "memcached_servers = 127.0.0.1:11211\n")   # not implemented: ignored
    auth = KeystoneAuth.from_config(conf)
    assert auth.cache_seconds == 17
    assert auth.keystone.url == keystone_url().rstrip("/")   # the catalog's public one
    client = api_of(tmp_path, auth)
    alice = identitykit.login("alice")
    listed = client.get("/environments", headers={"X-Auth-Token": alice.token})
    assert listed.status_code == 200, listed.text
    refused = client.get("/environments", headers={"X-Auth-Token": "forged"})
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"] == 'Keystone uri="https://keystone.example.com/v3"'


def test_the_deprecated_keystone_group_is_still_read_with_a_warning(tmp_path, caplog):
    conf = conf_of(tmp_path, "[keystone]\n" + service_user() + "cache_seconds = 9\n")
    with caplog.at_level(logging.WARNING, logger="oslo_config.cfg"):
        auth = KeystoneAuth.from_config(conf)
    assert auth.cache_seconds == 9
    warned = [r.getMessage() for r in caplog.records if r.name == "oslo_config.cfg"]
    assert any('"cache_seconds" from group "keystone" is deprecated' in m
               and '"token_cache_time" from group "keystone_authtoken"' in m for m in warned)
    assert any('"password" from group "keystone" is deprecated' in m for m in warned)
    assert all(identitykit.USERS["fornace"][0] not in m for m in warned)
    alice = identitykit.login("alice")
    assert auth.context({"x-auth-token": alice.token}).tenant_id == alice.project_id


def test_keystone_authtoken_wins_over_the_old_group(tmp_path):
    conf = conf_of(tmp_path, "[keystone]\nauth_url = http://127.0.0.1:9/v3\n"
                             "username = nobody\ncache_seconds = 5\n"
                             "[keystone_authtoken]\n" + service_user())
    auth = KeystoneAuth.from_config(conf)
    assert conf.keystone_authtoken.auth_url == keystone_url()
    assert auth.cache_seconds == 5   # option by option: the new group sets none
    alice = identitykit.login("alice")
    assert auth.context({"x-auth-token": alice.token}).user_id == alice.user_id


def test_an_interface_the_catalog_lacks_falls_back_to_auth_url(tmp_path):
    conf = conf_of(tmp_path, "[keystone_authtoken]\n" + service_user()
                   + "region_name = NoSuchRegion\ntoken_cache_time = -1\n")
    auth = KeystoneAuth.from_config(conf)
    assert auth.cache_seconds == 0
    assert auth.keystone.url == keystone_url().rstrip("/")
    alice = identitykit.login("alice")
    assert auth.context({"x-auth-token": alice.token}).tenant_id == alice.project_id


def test_without_auth_url_keystone_mode_says_which_section(tmp_path):
    keystone_url()
    conf = conf_of(tmp_path, "[keystone_authtoken]\nusername = fornace\n")
    with pytest.raises(ValueError, match=r"\[keystone_authtoken\] auth_type and auth_url"):
        KeystoneAuth.from_config(conf)


def test_the_sample_lists_keystonemiddleware_names_and_the_old_group():
    (group, opts), = identity.list_opts()
    names = {opt.dest for opt in opts}
    assert group == "keystone_authtoken"
    assert {"www_authenticate_uri", "token_cache_time", "interface", "region_name",
            "auth_url", "username", "password", "project_name", "user_domain_name",
            "project_domain_name", "cafile", "insecure"} <= names
    old = {(d.name, d.group) for opt in opts for d in opt.deprecated_opts}
    assert {("auth_url", "keystone"), ("cache_seconds", "keystone"),
            ("password", "keystone")} <= old
