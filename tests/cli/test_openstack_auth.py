"""The client commands with OpenStack credentials, against the real Keystone of
keystone-up (``identitykit``) and a Fornace API in keystone mode.

``fornace`` runs as its users run it (the installed console script, in a
subprocess with a clean environment: no FORNACE_URL, no token), given an
openrc's OS_* variables or a cloud of clouds.yaml (its password in
secure.yaml): it logs in to Keystone, finds the API as the catalog's
``application-catalog`` endpoint and acts as that user.  A refused password
is one line and exit 3, never echoed; no catalog entry, no cloud, no file
are clear usage errors (exit 2).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

import identitykit
from clikit import one_line_error
from localkit import running_onebox
from services import keystone_url

BIN = Path(sys.executable).parent / "fornace"
PASSWORDS = [password for password, _ in identitykit.USERS.values()]


def base_url(url: str) -> str:
    """``http://host:5000`` of ``http://host:5000/v3``."""
    return url[:-3] if url.rstrip("/").endswith("/v3") else url


def os_variables(user: str, auth_url: str | None = None,
                 password: str | None = None) -> dict[str, str]:
    """An openrc's variables for a seeded user."""
    secret, project = identitykit.USERS[user]
    return {"OS_AUTH_URL": auth_url or keystone_url(), "OS_USERNAME": user,
            "OS_PASSWORD": secret if password is None else password,
            "OS_PROJECT_NAME": project, "OS_USER_DOMAIN_NAME": "Default",
            "OS_PROJECT_DOMAIN_NAME": "Default"}


@pytest.fixture(scope="module")
def box(tmp_path_factory) -> Iterator[object]:
    """Fornace in keystone mode; validations not cached, so a revoked token is refused
    at once."""
    from fornace.cli.main import build_conf

    url = keystone_url()
    conf = build_conf()
    conf(["up"], project="fornace", default_config_files=[], default_config_dirs=[])
    conf.set_override("auth_mode", "keystone", group="api")
    identitykit.set_keystone_options(conf, url)
    conf.set_override("token_cache_time", 0, group="keystone_authtoken")
    yield from running_onebox(tmp_path_factory.mktemp("cli-keystone") / "state", conf=conf)


@pytest.fixture
def catalog(box) -> Iterator[str]:
    """The box as the catalog's application-catalog service, for the test."""
    with identitykit.catalog_entry("application-catalog", box.url):
        yield box.url


@pytest.fixture
def fornace(tmp_path):
    """``fornace(*args, env={...}, cwd=...)``: the console script in a clean
    environment (PATH, a home of the test's own, ``env``)."""
    home = tmp_path / "home"
    home.mkdir()

    def run(*args: str, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
        clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
                 "FORNACE_SESSIONS": str(home / "sessions"), "LANG": "C.UTF-8"}
        command = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "fornace.cli"]
        return subprocess.run([*command, *args], env={**clean, **(env or {})},
                              cwd=cwd or home, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=120)
    return run


def shown(done: subprocess.CompletedProcess) -> str:
    return done.stdout + done.stderr


def assert_no_secret(done: subprocess.CompletedProcess, *tokens: str) -> None:
    for secret in [*PASSWORDS, "wrong-secret", *tokens]:
        assert secret not in shown(done), f"a secret was printed: {shown(done)}"


def environments(done: subprocess.CompletedProcess) -> dict[str, dict]:
    assert done.returncode == 0, shown(done)
    return {e["name"]: e for e in json.loads(done.stdout)["environments"]}


def delete(fornace, name: str, env: dict[str, str]) -> None:
    done = fornace("env", "delete", name, "--yes", env=env)
    assert done.returncode == 0, shown(done)


def test_os_variables_reach_the_api_of_the_catalog_as_their_user(fornace, catalog):
    alice = os_variables("alice")
    created = fornace("env", "create", "alice-env", "--json", env=alice)
    assert created.returncode == 0, shown(created)
    assert json.loads(created.stdout)["tenant_id"] == identitykit.login("alice").project_id
    assert_no_secret(created)
    try:
        # the auth URL without /v3 works as well: keystoneauth1 discovers the version
        listed = fornace("env", "list", "--json",
                         env=os_variables("alice", base_url(keystone_url())))
        assert "alice-env" in environments(listed)
        assert_no_secret(listed)
        assert "alice-env" not in environments(fornace("env", "list", "--json",
                                                       env=os_variables("bob")))
        refused = fornace("env", "show", "alice-env", env=os_variables("bob"))
        assert refused.returncode == 2 and "alice-env" in refused.stderr   # not found for bob
    finally:
        delete(fornace, "alice-env", alice)


def test_a_cloud_of_clouds_yaml_with_its_password_in_secure_yaml(fornace, catalog, tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    clouds = {"clouds": {
        name: {"auth": {"auth_url": base_url(keystone_url()) if name == "bob"
                        else keystone_url(),
                        "username": name, "project_name": identitykit.USERS[name][1],
                        "user_domain_name": "Default", "project-domain-name": "Default"},
               "region_name": "RegionOne", "interface": "public"}
        for name in ("alice", "bob")}}
    secure = {"clouds": {name: {"auth": {"password": identitykit.USERS[name][0]}}
                         for name in ("alice", "bob")}}
    (folder / "clouds.yaml").write_text(json.dumps(clouds))     # JSON is YAML
    (folder / "secure.yaml").write_text(json.dumps(secure))
    created = fornace("env", "create", "cloud-env", env={"OS_CLOUD": "alice"}, cwd=folder)
    assert created.returncode == 0, shown(created)
    try:
        assert "cloud-env" in environments(fornace("--os-cloud", "alice", "env", "list",
                                                   "--json", cwd=folder))
        assert "cloud-env" not in environments(fornace("env", "list", "--json", "--os-cloud",
                                                       "bob", cwd=folder))
        # the files named by OS_CLIENT_CONFIG_FILE and OS_CLIENT_SECURE_FILE, from
        # anywhere (openstacksdk looks for no secure.yaml beside a named clouds.yaml);
        # an explicit OS_PASSWORD overrides the cloud's (here a wrong one)
        (folder / "secure.yaml").write_text(json.dumps(
            {"clouds": {"alice": {"auth": {"password": "wrong-secret"}}}}))
        named = {"OS_CLOUD": "alice", "OS_CLIENT_CONFIG_FILE": str(folder / "clouds.yaml"),
                 "OS_CLIENT_SECURE_FILE": str(folder / "secure.yaml")}
        refused = fornace("env", "list", env=named)
        assert "refused the login of user alice" in one_line_error(refused, 3)
        assert_no_secret(refused)
        listed = fornace("env", "list", "--json",
                         env={**named, "OS_PASSWORD": identitykit.USERS["alice"][0]})
        assert "cloud-env" in environments(listed)
    finally:
        delete(fornace, "cloud-env", {**os_variables("alice")})


def test_a_wrong_password_is_one_line_exit_3_and_never_echoed(fornace):
    for auth_url in (keystone_url(), base_url(keystone_url())):
        done = fornace("env", "list", env=os_variables("alice", auth_url, "wrong-secret"))
        line = one_line_error(done, 3)
        assert "refused the login of user alice (project demo-a)" in line
        assert "Traceback" not in done.stderr
        assert_no_secret(done)
    on_command_line = fornace("env", "list", "--os-password", "wrong-secret",
                              env=os_variables("alice"))
    assert "refused the login" in one_line_error(on_command_line, 3)
    assert_no_secret(on_command_line)


def test_without_a_catalog_entry_the_error_says_to_set_url(fornace, box):
    done = fornace("env", "list", env=os_variables("alice"))
    line = one_line_error(done, 2)
    assert "'application-catalog'" in line and "--url" in line
    # with --url (or FORNACE_URL) the catalog is not asked: the session's token goes there
    listed = fornace("env", "list", "--json", "--url", box.url, env=os_variables("alice"))
    assert isinstance(environments(listed), dict)
    assert_no_secret(listed)


def test_missing_cloud_or_file_or_password_are_usage_errors(fornace, tmp_path):
    nowhere = fornace("env", "list", env={"OS_CLOUD": "nowhere"})
    assert "no clouds.yaml was found" in one_line_error(nowhere, 2)
    (tmp_path / "clouds.yaml").write_text("clouds:\n  alice:\n    auth: {}\n")
    named = {"OS_CLOUD": "nowhere", "OS_CLIENT_CONFIG_FILE": str(tmp_path / "clouds.yaml")}
    assert "cloud 'nowhere'" in one_line_error(fornace("env", "list", env=named), 2)
    gone = {**named, "OS_CLIENT_CONFIG_FILE": str(tmp_path / "gone.yaml")}
    assert "OS_CLIENT_CONFIG_FILE" in one_line_error(fornace("env", "list", env=gone), 2)
    no_password = {k: v for k, v in os_variables("alice").items() if k != "OS_PASSWORD"}
    assert "OS_PASSWORD" in one_line_error(fornace("env", "list", env=no_password), 2)


def test_a_token_is_still_sent_as_is(fornace, box):
    token = identitykit.login("bob").token
    done = fornace("env", "list", "--json", env={"FORNACE_URL": box.url,
                                                 "FORNACE_TOKEN": token})
    assert isinstance(environments(done), dict)
    assert_no_secret(done, token)
    refused = fornace("env", "list", "--url", box.url, "--token", "forged")
    assert one_line_error(refused, 3)


def test_a_token_the_api_refuses_is_renewed_once(box, catalog, monkeypatch):
    """A long command (``--follow``) outlives tokens: the session gets another
    one when its token expires, or when Fornace refuses it (revoked)."""
    from fornace.cli.client.common import add_connection_options, client_of

    alice = os_variables("alice")
    for name in list(os.environ):
        if name.startswith("OS_") or name in ("FORNACE_URL", "FORNACE_TOKEN"):
            monkeypatch.delenv(name)
    parser = argparse.ArgumentParser()
    add_connection_options(parser)
    command = parser.parse_args(["--os-auth-url", alice["OS_AUTH_URL"],
                                 "--os-username", "alice", "--os-password", alice["OS_PASSWORD"],
                                 "--os-project-name", "demo-a",
                                 "--os-user-domain-name", "Default",
                                 "--os-project-domain-name", "Default"])
    client = client_of(command)
    assert client.url == box.url
    client.get("/environments")
    first = client.login.headers()["X-Auth-Token"]
    revoked = identitykit.identity(identitykit.admin(), "DELETE", "/auth/tokens",
                                   headers={"X-Subject-Token": first})
    assert revoked.status_code == 204
    assert "environments" in client.get("/environments")    # refused, renewed, sent again
    assert client.login.headers()["X-Auth-Token"] != first
