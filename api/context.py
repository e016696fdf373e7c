"""The caller of every store call, and the two checks every store makes of it.

A :class:`Context` says who calls (project, user, token, what the policy
knows of them); :func:`allowed` and :func:`session_allowed` decide whether
that caller may reach an environment or a configuration session: another
project's environment is a 403 but for the cloud admin (``is_admin``, as
:mod:`fornace.api.policy` decides), a missing one a 404.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fornace.api.errors import Forbidden, NotFound


@dataclass(frozen=True)
class Context:
    """Who calls: their project (tenant) and user, their token (keystone mode) and
    what the policy needs to know of them (:mod:`fornace.api.policy`)."""

    tenant_id: str
    user_id: str
    token: str | None = None
    is_admin: bool = False          # may act on every tenant (the policy's cloud_admin)
    roles: frozenset[str] = frozenset()
    user_name: str = ""
    project_name: str = ""
    project_domain_id: str = ""
    expires_at: float | None = None  # the token's end (time.time()); None: no token
    # how the token was delegated to its bearer, when it was (keystone mode):
    # "application credential NAME", "trust", "OAuth 1.0a" -- Keystone lets no such
    # token make trusts (fornace.api.trusts)
    delegated_by: str = ""


def allowed(ctx: Context, env_id: str, env: Any) -> Any:
    """``env`` (an Environment or a row of its columns) if the caller may use it."""
    if env is None:
        raise NotFound(f"environment {env_id} not found")
    if env.tenant_id != ctx.tenant_id and not ctx.is_admin:
        raise Forbidden(f"not authorized to access environment {env_id}")
    return env


def session_allowed(ctx: Context, env: Any, session_id: str, session: Any,
                    editable: bool) -> Any:
    """``session`` (a ConfigSession or a row of its columns), checked."""
    if session is None or session.environment_id != env.id:
        raise NotFound(f"session {session_id} not found in environment {env.id}")
    if session.user_id != ctx.user_id and not ctx.is_admin:
        raise Forbidden(f"not authorized to access session {session_id}")
    if editable:
        if session.state != "open":
            raise Forbidden(f"session {session_id} is {session.state}: it cannot be changed")
        if session.version != env.version:
            raise Forbidden(f"session {session_id} is invalid: environment {env.id} "
                            f"changed since it was opened")
    return session
