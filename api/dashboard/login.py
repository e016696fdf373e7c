"""Who uses the dashboard: the identity the login page keeps in cookies.

In noauth mode the tenant and user come from cookies set by the login page
(the API's noauth defaults without them), exactly as the JSON API takes them
from headers; in keystone mode a token kept in an HttpOnly cookie is
validated like an ``X-Auth-Token`` header.  Either way the API's own
authenticator decides, so the dashboard cannot grant more than the API.
"""
from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from fornace.api.auth import NoAuth
from fornace.api.errors import Unauthorized
from fornace.api.store import Context

TOKEN_COOKIE = "fornace_token"
TENANT_COOKIE = "fornace_tenant"
USER_COOKIE = "fornace_user"
COOKIE_SECONDS = 12 * 3600


class LoginRequired(Exception):
    """No usable identity: the page redirects to the login page (with why)."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


def uses_tokens(auth: Any) -> bool:
    """Keystone-style authentication (a token), as opposed to noauth headers."""
    return not isinstance(auth, NoAuth)


def identity_headers(auth: Any, cookies: dict[str, str]) -> dict[str, str]:
    """The headers the API's authenticator would get, rebuilt from the cookies."""
    if uses_tokens(auth):
        token = cookies.get(TOKEN_COOKIE)
        if not token:
            raise LoginRequired()
        return {"x-auth-token": token}
    pairs = (("x-tenant-id", cookies.get(TENANT_COOKIE)), ("x-user-id", cookies.get(USER_COOKIE)))
    return {name: value for name, value in pairs if value}


async def authenticate(auth: Any, headers: dict[str, str]) -> Context:
    """The caller's context; :class:`LoginRequired` when the authenticator refuses."""
    try:
        if isinstance(auth, NoAuth):  # no I/O
            return auth.context(headers)
        return await run_in_threadpool(auth.context, headers)  # e.g. a Keystone call
    except Unauthorized as exc:
        raise LoginRequired(exc.message) from None


async def current_context(request: Request) -> Context:
    """The context of the request's cookies (also kept in ``request.state.ctx``)."""
    auth = request.app.state.auth
    ctx = await authenticate(auth, identity_headers(auth, dict(request.cookies)))
    request.state.ctx = ctx
    return ctx


def remember(request: Request, response: Response, values: dict[str, str]) -> None:
    """Keep the identity of a successful login (HttpOnly: scripts never read it)."""
    for name, value in values.items():
        response.set_cookie(name, value, max_age=COOKIE_SECONDS, path=cookie_path(request),
                            httponly=True, samesite="lax",
                            secure=request.url.scheme == "https")


def forget(request: Request, response: Response) -> None:
    for name in (TOKEN_COOKIE, TENANT_COOKIE, USER_COOKIE):
        response.delete_cookie(name, path=cookie_path(request))


def cookie_path(request: Request) -> str:
    return request.scope.get("root_path") or "/"
