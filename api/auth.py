"""Who is calling: noauth headers or a Keystone token.

Keystone validations are cached briefly so a busy dashboard does not cost
one Keystone round trip per request.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Mapping

from fornace.api.errors import Unauthorized
from fornace.api.store import ID_LENGTH, Context


class NoAuth:
    """One-machine mode: tenant and user from headers, else the defaults."""

    def __init__(self, default_tenant: str, default_user: str) -> None:
        self.default_tenant = default_tenant
        self.default_user = default_user

    def context(self, headers: Mapping[str, str]) -> Context:
        tenant = headers.get("x-tenant-id") or self.default_tenant
        user = headers.get("x-user-id") or self.default_user
        for header, value in (("X-Tenant-Id", tenant), ("X-User-Id", user)):
            # stored in String(64) columns; PostgreSQL refuses longer values and NUL
            if len(value) > ID_LENGTH or not value.isprintable():
                raise Unauthorized(f"{header} must be at most {ID_LENGTH} printable characters")
        return Context(tenant_id=tenant, user_id=user, token=headers.get("x-auth-token"))


class KeystoneAuth:
    """Validates ``X-Auth-Token`` with Keystone's ``GET /v3/auth/tokens``."""

    def __init__(self, session: Any, auth_url: str, cache_seconds: int = 60) -> None:
        self.session = session  # keystoneauth1 Session authenticated as the service user
        self.auth_url = auth_url.rstrip("/")
        self.cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, Context]] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, conf: Any) -> "KeystoneAuth":
        from keystoneauth1 import session as ks_session
        from keystoneauth1.identity import v3

        ks = conf.keystone
        if not ks.auth_url:
            raise ValueError("[keystone] auth_url is required in keystone auth mode")
        plugin = v3.Password(auth_url=ks.auth_url, username=ks.username, password=ks.password,
                             project_name=ks.project_name,
                             user_domain_name=ks.user_domain_name,
                             project_domain_name=ks.project_domain_name)
        return cls(ks_session.Session(auth=plugin), ks.auth_url, ks.cache_seconds)

    def context(self, headers: Mapping[str, str]) -> Context:
        token = headers.get("x-auth-token")
        if not token:
            raise Unauthorized("X-Auth-Token is required")
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(token)
        if cached is not None and cached[0] > now:
            return cached[1]
        context = self._validate(token)
        with self._lock:
            if len(self._cache) > 10000:
                self._cache.clear()
            self._cache[token] = (now + self.cache_seconds, context)
        return context

    def _validate(self, token: str) -> Context:
        from keystoneauth1 import exceptions as ks_exc

        try:
            response = self.session.get(f"{self.auth_url}/auth/tokens",
                                        headers={"X-Subject-Token": token},
                                        authenticated=True, raise_exc=False)
        except ks_exc.ClientException as exc:
            raise Unauthorized(f"cannot validate the token with Keystone: {exc}") from None
        if response.status_code != 200:
            raise Unauthorized("the token is invalid or expired")
        body = response.json().get("token", {})
        project = body.get("project") or {}
        user = body.get("user") or {}
        if not project.get("id"):
            raise Unauthorized("the token is not scoped to a project")
        roles = {role.get("name") for role in body.get("roles") or []}
        return Context(tenant_id=project["id"], user_id=user.get("id", ""), token=token,
                       is_admin="admin" in roles)
