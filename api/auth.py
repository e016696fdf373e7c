"""Who is calling: noauth headers or a Keystone token.

Keystone validations are cached briefly (never past the token's expiry) so a
busy dashboard does not cost one Keystone round trip per request.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Mapping

from fornace.api.errors import Unauthorized
from fornace.common import identity
from fornace.common.identity import IdentityError, Keystone
from fornace.api.ids import ID_LENGTH
from fornace.api.context import Context


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
        # a member of the project its header names: the policy's defaults let it
        # do everything there and nothing elsewhere (fornace.api.policy)
        return Context(tenant_id=tenant, user_id=user, token=headers.get("x-auth-token"),
                       roles=frozenset({"member"}))


class IdentityUnreachable(Unauthorized):
    """Keystone could not say whether a token is valid (unreachable, or an error
    of its own): still a 401 for the API, but the dashboard tells it apart from a
    token Keystone refused (an expired session)."""


class KeystoneAuth:
    """Validates ``X-Auth-Token`` with Keystone (``GET /v3/auth/tokens``).

    A validation is kept ``cache_seconds`` at most, and never past the token's own
    ``expires_at``.  Every 401 names Keystone in ``WWW-Authenticate`` (as
    keystonemiddleware does), so a client knows where to get a token.
    """

    MAX_CACHED = 10000

    def __init__(self, keystone: Keystone, cache_seconds: int = 60,
                 clock: Callable[[], float] = time.time,
                 www_authenticate_uri: str | None = None) -> None:
        self.keystone = keystone
        self.cache_seconds = max(cache_seconds, 0)   # -1 (keystonemiddleware's "off"): 0
        self.www_authenticate_uri = www_authenticate_uri
        self._clock = clock
        self._cache: dict[str, tuple[float, Context]] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, conf: Any) -> "KeystoneAuth":
        if not identity.configured(conf):
            raise ValueError(f"[{identity.AUTHTOKEN}] auth_type and auth_url are required "
                             f"in keystone auth mode")
        try:
            keystone = Keystone.from_config(conf)
        except IdentityError as exc:
            raise ValueError(str(exc)) from None
        group = conf[identity.AUTHTOKEN]
        return cls(keystone, group.token_cache_time,
                   www_authenticate_uri=group.www_authenticate_uri)

    @property
    def www_authenticate(self) -> str:
        """The 401's ``WWW-Authenticate``: ``www_authenticate_uri``, else the
        identity URL tokens are validated at."""
        if self.www_authenticate_uri:
            return f'Keystone uri="{self.www_authenticate_uri}"'
        try:
            return f'Keystone uri="{self.keystone.url}"'
        except IdentityError:
            return "Keystone"

    def refuse(self, message: str, kind: type[Unauthorized] = Unauthorized) -> Unauthorized:
        return kind(message, headers={"WWW-Authenticate": self.www_authenticate})

    def context(self, headers: Mapping[str, str]) -> Context:
        token = headers.get("x-auth-token")
        if not token:
            raise self.refuse("X-Auth-Token is required")
        now = self._clock()
        with self._lock:
            cached = self._cache.get(token)
        if cached is not None and cached[0] > now:
            return cached[1]
        context = self._validate(token)
        until = now + self.cache_seconds
        if context.expires_at is not None:
            until = min(until, context.expires_at)
        with self._lock:
            if len(self._cache) >= self.MAX_CACHED:
                self._cache = {key: value for key, value in self._cache.items()
                               if value[0] > now}
                if len(self._cache) >= self.MAX_CACHED:
                    self._cache.clear()
            self._cache[token] = (until, context)
        return context

    def forget(self, token: str) -> None:
        """Drop a token from the cache (after a logout revoked it)."""
        with self._lock:
            self._cache.pop(token, None)

    def _validate(self, token: str) -> Context:
        try:
            body = self.keystone.validate(token)
        except IdentityError as exc:
            raise self.refuse(f"cannot validate the token: {exc}", IdentityUnreachable) from None
        if body is None:
            raise self.refuse("the token is invalid or expired")
        return context_of(token, body)


def context_of(token: str, body: dict[str, Any]) -> Context:
    """The caller a (valid) Keystone token body describes."""
    project = body.get("project") or {}
    user = body.get("user") or {}
    if not project.get("id"):
        raise Unauthorized("the token is not scoped to a project")
    roles = frozenset(str(role.get("name")) for role in body.get("roles") or []
                      if isinstance(role, dict) and role.get("name"))
    domain = project.get("domain") or {}
    return Context(tenant_id=project["id"], user_id=user.get("id", ""), token=token,
                   roles=roles, user_name=user.get("name", ""),   # is_admin: the policy's
                   project_name=project.get("name", ""),
                   project_domain_id=domain.get("id", ""),
                   expires_at=identity.expiry(body), delegated_by=delegation_of(body))


def delegation_of(body: dict[str, Any]) -> str:
    """How a token body says its token was delegated ("" when it was not): an
    application credential (``application_credential``, named), a trust
    (``OS-TRUST:trust``) or OAuth 1.0a (``OS-OAUTH1``)."""
    credential = body.get("application_credential")
    if isinstance(credential, dict) or "application_credential" in (body.get("methods") or []):
        name = credential.get("name") if isinstance(credential, dict) else None
        return f"application credential {name!r}" if name else "an application credential"
    if body.get("OS-TRUST:trust"):
        return "trust"
    if body.get("OS-OAUTH1"):
        return "OAuth 1.0a"
    return ""
