"""The real Keystone of ``../shared/keystone/keystone-up`` for the tests: its seeded
users, tokens of them, admin calls (trusts, catalog entries), and a Keystone of a
test's own (e.g. with short-lived tokens).

Every helper starts with :func:`services.keystone_url`, so a test using one skips
(fails under ``FORNACE_REQUIRE_SERVICES=1``) where no Keystone runs.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from services import heat_url, keystone_url

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "keystone"

# keystone-up's seed: user -> (password, project)
USERS = {"admin": ("admin-secret", "admin"), "fornace": ("fornace-secret", "service"),
         "alice": ("alice-secret", "demo-a"), "bob": ("bob-secret", "demo-b")}


@dataclass(frozen=True)
class Login:
    token: str
    user_id: str
    project_id: str
    session: Any        # keystoneauth1 Session of the user, scoped to the project


def session_of(user: str, url: str | None = None, project: str | None = None) -> Any:
    """A keystoneauth1 session of a seeded (or :func:`temporary_user`) user
    (password auth, project scoped)."""
    from keystoneauth1 import session
    from keystoneauth1.identity import generic
    password, default_project = USERS[user]
    return session.Session(auth=generic.Password(
        auth_url=url or keystone_url(), username=user, password=password,
        project_name=project or default_project, user_domain_id="default",
        project_domain_id="default"))


def login(user: str, url: str | None = None) -> Login:
    """A fresh token of a seeded user."""
    s = session_of(user, url)
    return Login(s.get_token(), s.get_user_id(), s.get_project_id(), s)


def admin(url: str | None = None) -> Any:
    """The cloud admin's session, for calls on Keystone itself."""
    return session_of("admin", url)


def identity(session: Any, method: str, path: str, **kwargs: Any) -> Any:
    """A call of the identity v3 API (``path`` below /v3) as ``session``."""
    from keystoneauth1 import plugin
    kwargs.setdefault("raise_exc", False)
    return session.request(path, method, endpoint_filter={
        "interface": plugin.AUTH_INTERFACE, "version": (3, 0)}, **kwargs)


@contextlib.contextmanager
def temporary_user(project: str, roles: list[str], url: str | None = None) -> Iterator[str]:
    """A user of the test's own with ``roles`` on ``project`` (a seeded project's
    name), known to :func:`login` for the block and deleted after it."""
    session = admin(url)
    project_id = _id_of(session, "projects", project)
    name = f"test-{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    made = identity(session, "POST", "/users", json={"user": {
        "name": name, "password": password, "domain_id": "default",
        "default_project_id": project_id}})
    assert made.status_code == 201, made.text
    user_id = made.json()["user"]["id"]
    USERS[name] = (password, project)
    try:
        for role in roles:
            granted = identity(session, "PUT", f"/projects/{project_id}/users/{user_id}"
                               f"/roles/{_id_of(session, 'roles', role)}")
            assert granted.status_code == 204, granted.text
        yield name
    finally:
        USERS.pop(name, None)
        identity(session, "DELETE", f"/users/{user_id}")


def _id_of(session: Any, collection: str, name: str) -> str:
    found = identity(session, "GET", f"/{collection}?name={name}").json()[collection]
    assert found, f"no {collection[:-1]} named {name}"
    return found[0]["id"]


def trusts_of(user_id: str, url: str | None = None) -> list[dict[str, Any]]:
    """The trusts ``user_id`` gave, as Keystone lists them."""
    response = identity(admin(url), "GET", f"/OS-TRUST/trusts?trustor_user_id={user_id}")
    assert response.status_code == 200, response.text
    return response.json()["trusts"]


def trust_exists(trust_id: str, url: str | None = None) -> bool:
    response = identity(admin(url), "GET", f"/OS-TRUST/trusts/{trust_id}")
    assert response.status_code in (200, 404), response.text
    return response.status_code == 200


def set_keystone_options(conf: Any, url: str | None = None) -> None:
    """``[keystone_authtoken]`` as the Fornace service user of keystone-up's seed."""
    from fornace.common import identity
    identity.ensure(conf, identity.AUTHTOKEN)
    conf.set_override("auth_type", "password", group=identity.AUTHTOKEN)
    identity.plugin_options(conf, identity.AUTHTOKEN)
    values = {"auth_url": url or keystone_url(),
              "username": "fornace", "password": USERS["fornace"][0],
              "project_name": "service", "user_domain_name": "Default",
              "project_domain_name": "Default"}
    for name, value in values.items():
        conf.set_override(name, value, group=identity.AUTHTOKEN)


def api_conf(url: str | None = None) -> Any:
    """The API's options (oslo.config), ``[keystone_authtoken]`` set as by
    :func:`set_keystone_options`."""
    from oslo_config import cfg
    from fornace.api import config
    conf = cfg.ConfigOpts()
    config.register(conf)
    conf([])
    set_keystone_options(conf, url)
    return conf


def keystone_auth(url: str | None = None) -> Any:
    """The API's authenticator on the real Keystone, as ``fornace api`` builds it."""
    from fornace.api.auth import KeystoneAuth
    return KeystoneAuth.from_config(api_conf(url))


@contextlib.contextmanager
def catalog_entry(service_type: str, url: str, keystone: str | None = None) -> Iterator[str]:
    """A service of ``service_type`` with public/internal endpoints at ``url`` in the
    catalog for the block (removed after it); yields the service's id."""
    session = admin(keystone)
    name = f"test-{service_type}-{uuid.uuid4().hex[:6]}"
    response = identity(session, "POST", "/services",
                        json={"service": {"type": service_type, "name": name}})
    assert response.status_code == 201, response.text
    service_id = response.json()["service"]["id"]
    try:
        for interface in ("public", "internal"):
            made = identity(session, "POST", "/endpoints", json={"endpoint": {
                "service_id": service_id, "interface": interface, "url": url,
                "region_id": "RegionOne"}})
            assert made.status_code == 201, made.text
        yield service_id
    finally:
        identity(session, "DELETE", f"/services/{service_id}")   # its endpoints go with it


@contextlib.contextmanager
def own_keystone(tmp_path: Path, expiration: int, with_heat: bool = True) -> Iterator[str]:
    """A Keystone of the test's own whose tokens live ``expiration`` seconds: a copy
    of keystone-up with its ``[token] expiration`` changed, sharing the installed
    virtualenv; stopped after the block.  Yields its v3 URL."""
    keystone_url()   # the shared one runs: keystone-up is installed here
    cached = Path(os.environ.get("FORNACE_KEYSTONE_HOME",
                                 Path.home() / ".cache" / "fornace-keystone"))
    tools = tmp_path / "keystone-tools"
    shutil.copytree(SHARED, tools)
    conf = tools / "keystone.conf.in"
    text, changed = re.subn(r"(?m)^expiration = \d+$", f"expiration = {expiration}",
                            conf.read_text())
    assert changed == 1, "keystone.conf.in has no [token] expiration line"
    conf.write_text(text)
    home = tmp_path / "keystone-home"
    home.mkdir()
    (home / "venv").symlink_to(cached / "venv")
    env = {**os.environ, "FORNACE_KEYSTONE_HOME": str(home)}
    args = [str(tools / "keystone-up"), str(_free_port())] + ([_heat_root()] if with_heat else [])
    started = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, f"keystone-up failed: {started.stderr}"
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([str(tools / "keystone-down")], env=env, capture_output=True,
                       timeout=60)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _heat_root() -> str:
    """heat-up's URL without its ``/v1/<project>`` (keystone-up adds that)."""
    return re.sub(r"/v1/.*$", "", heat_url())
