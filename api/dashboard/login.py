"""Who uses the dashboard: the identity the login page keeps in cookies.

In noauth mode the tenant and user come from cookies set by the login page
(the API's noauth defaults without them), exactly as the JSON API takes them
from headers; in keystone mode a token kept in an HttpOnly cookie is
validated like an ``X-Auth-Token`` header.  Either way the API's own
authenticator decides, so the dashboard cannot grant more than the API.

In keystone mode the token cookie lives as long as the token, and a second
cookie (:data:`LOGIN_COOKIE`: who logged in, never a secret, gone when the
browser closes) tells "never logged in" from "logged in, but the session is
over": the latter gets a login page saying the session expired, with the
user name and project filled in.
"""
from __future__ import annotations

import json
import math
import time
from typing import Any
from urllib.parse import quote, unquote

from fastapi import Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from fornace.api.auth import IdentityUnreachable, NoAuth
from fornace.api.errors import Unauthorized, Unavailable
from fornace.api.context import Context

TOKEN_COOKIE = "fornace_token"
LOGIN_COOKIE = "fornace_login"
TENANT_COOKIE = "fornace_tenant"
USER_COOKIE = "fornace_user"
COOKIE_SECONDS = 12 * 3600      # noauth identities: they never expire by themselves
EXPIRED = "Your session has expired: log in again."
LOGIN_FIELDS = ("username", "project", "user_domain", "project_domain")


class LoginRequired(Exception):
    """No usable identity: the page redirects to the login page (with why).

    ``expired``: there was a session (a token Keystone now refuses, or the
    trace of a login whose token cookie is gone): its token cookie goes too.
    """

    def __init__(self, reason: str = "", expired: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.expired = expired


def uses_tokens(auth: Any) -> bool:
    """Keystone-style authentication (a token), as opposed to noauth headers."""
    return not isinstance(auth, NoAuth)


def identity_headers(auth: Any, cookies: dict[str, str]) -> dict[str, str]:
    """The headers the API's authenticator would get, rebuilt from the cookies."""
    if uses_tokens(auth):
        token = cookies.get(TOKEN_COOKIE)
        if not token:
            if cookies.get(LOGIN_COOKIE):
                raise LoginRequired(EXPIRED, expired=True)
            raise LoginRequired()
        return {"x-auth-token": token}
    pairs = (("x-tenant-id", cookies.get(TENANT_COOKIE)), ("x-user-id", cookies.get(USER_COOKIE)))
    return {name: value for name, value in pairs if value}


async def authenticate(auth: Any, headers: dict[str, str]) -> Context:
    """The caller's context; :class:`LoginRequired` when the authenticator refuses,
    :class:`Unavailable` (a 503 page, the session kept) when Keystone cannot tell."""
    try:
        if isinstance(auth, NoAuth):  # no I/O
            return auth.context(headers)
        return await run_in_threadpool(auth.context, headers)  # e.g. a Keystone call
    except IdentityUnreachable as exc:
        raise Unavailable(f"Keystone cannot check your login now ({exc.message}); "
                          "try again in a moment.") from None
    except Unauthorized as exc:
        raise LoginRequired(exc.message) from None


async def current_context(request: Request) -> Context:
    """The context of the request's cookies (also kept in ``request.state.ctx``)."""
    auth = request.app.state.auth
    try:
        ctx = await authenticate(auth, identity_headers(auth, dict(request.cookies)))
    except LoginRequired:
        if uses_tokens(auth) and request.cookies.get(TOKEN_COOKIE):
            raise LoginRequired(EXPIRED, expired=True) from None  # Keystone refused it
        raise
    request.state.ctx = ctx
    return ctx


def remember(request: Request, response: Response, values: dict[str, str]) -> None:
    """Keep the noauth identity of a successful login (HttpOnly: scripts never read it)."""
    for name, value in values.items():
        _set(request, response, name, value, COOKIE_SECONDS)


def remember_token(request: Request, response: Response, token: str,
                   expires_at: float | None, who: dict[str, str]) -> None:
    """Keep a Keystone login: the token until it expires (a browser forgets it
    then), and ``who`` logged in (the :data:`LOGIN_FIELDS`) for this browser
    session, to tell an expired session from no session."""
    seconds = COOKIE_SECONDS if expires_at is None else \
        max(0, math.floor(expires_at - time.time()))
    _set(request, response, TOKEN_COOKIE, token, seconds)
    _set(request, response, LOGIN_COOKIE,
         quote(json.dumps({name: who.get(name, "") for name in LOGIN_FIELDS})), None)


def last_login(request: Request) -> dict[str, str]:
    """Who logged in last in this browser (:data:`LOGIN_FIELDS`; empty: nobody)."""
    try:
        values = json.loads(unquote(request.cookies.get(LOGIN_COOKIE, "")))
    except ValueError:
        return {}
    if not isinstance(values, dict):
        return {}
    return {name: values[name] for name in LOGIN_FIELDS if isinstance(values.get(name), str)}


def forget(request: Request, response: Response) -> None:
    """Drop every cookie of the login (the session id of the form tokens goes
    too: :func:`fornace.api.dashboard.csrf.end_session`)."""
    for name in (TOKEN_COOKIE, LOGIN_COOKIE, TENANT_COOKIE, USER_COOKIE):
        response.delete_cookie(name, path=cookie_path(request))


def forget_token(request: Request, response: Response) -> None:
    """Drop a token Keystone refuses (the user name stays to fill the login form)."""
    response.delete_cookie(TOKEN_COOKIE, path=cookie_path(request))


def cookie_path(request: Request) -> str:
    return request.scope.get("root_path") or "/"


def _set(request: Request, response: Response, name: str, value: str,
         max_age: int | None) -> None:
    """An HttpOnly cookie of the dashboard (scripts never read it); ``max_age``
    None: until the browser closes."""
    response.set_cookie(name, value, max_age=max_age, path=cookie_path(request),
                        httponly=True, samesite="lax", secure=request.url.scheme == "https")
