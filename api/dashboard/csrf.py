"""Cross-site request forgery protection for the dashboard's forms.

Two checks, both needed for every form POST (the login's included):

* **Where it comes from.**  The browser's ``Origin`` must be this site (the
  scheme and ``Host`` the request reached the API with; the API refuses a
  ``Host`` it does not serve, :mod:`fornace.api.hosts`) or one of ``[api]
  allowed_origins``.  ``Origin: null`` (a sandboxed frame, a ``file:`` page,
  a page with ``Referrer-Policy: no-referrer``, a redirect across sites) is
  foreign.  Without ``Origin`` the ``Referer`` is checked the same way, and a
  POST with neither is refused too: every browser sends ``Origin`` with a form
  POST, so only a request that did not come from a page of this dashboard
  lacks both -- OWASP's CSRF cheat sheet recommends blocking those (scripts use
  the JSON API, not the forms).
* **A token bound to the session.**  The form carries
  ``HMAC(server secret, session id, who is logged in)``: the session id is a
  random value kept in an HttpOnly cookie (:data:`COOKIE`, made with the first
  page a browser gets -- the login page's is the pre-session nonce -- and made
  anew at each login, gone at logout), and the identity is the login's cookies
  (the Keystone token, or noauth's project and user).  Unlike a token that is
  only compared with a cookie (double submit), a page that can set cookies for
  this host (another port of it, a sibling subdomain) cannot make a pair that
  passes: it does not know the secret, and a pair it got from the server for
  its own session does not match the victim's login.  The secret comes from
  ``[api] dashboard_secret`` or a file in the state folder
  (:mod:`fornace.api.dashboard.formsecret`).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from typing import Optional

from fastapi import Request
from fastapi.responses import Response

from fornace.api.crossorigin import normalize_origin, own_origin
from fornace.api.dashboard.login import TENANT_COOKIE, TOKEN_COOKIE, USER_COOKIE, cookie_path
from fornace.api.errors import Forbidden

COOKIE = "fornace_session"
FIELD = "csrf_token"
_WELL_FORMED = re.compile(r"[A-Za-z0-9_-]{43}")
_PURPOSE = b"fornace-dashboard-form-token\x00"
EXPIRED = ("the form has expired or did not come from this dashboard: "
           "reload the page and try again")


class CsrfError(Forbidden):
    """A form that did not come from one of the dashboard's own pages."""


def _secret(request: Request) -> bytes:
    return request.app.state.form_secret


def session_id(request: Request) -> str:
    """The browser's session id: its cookie's, or one made for this request
    (set as a cookie by :func:`keep`)."""
    made = getattr(request.state, "new_session", None)
    if made is not None:
        return made
    existing = request.cookies.get(COOKIE, "")
    if _WELL_FORMED.fullmatch(existing):
        return existing
    made = request.state.new_session = secrets.token_urlsafe(32)
    return made


def _identity(request: Request) -> bytes:
    """Who the request's cookies say is logged in (the token, or noauth's names)."""
    cookies = request.cookies
    parts = (cookies.get(TOKEN_COOKIE, ""), cookies.get(TENANT_COOKIE, ""),
             cookies.get(USER_COOKIE, ""))
    return "\x00".join(parts).encode("utf-8", "surrogateescape")


def _sign(secret: bytes, session: str, identity: bytes) -> str:
    digest = hmac.new(secret, _PURPOSE + session.encode("ascii") + b"\x00" + identity,
                      hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def token(request: Request) -> str:
    """The form token of the request's session and login."""
    return _sign(_secret(request), session_id(request), _identity(request))


def keep(request: Request, response: Response) -> None:
    """Set the cookie of a session id :func:`session_id` made for this request."""
    made = getattr(request.state, "new_session", None)
    if made is not None:
        _set(request, response, made)


def new_session(request: Request, response: Response) -> None:
    """A new session id (at a login: the pre-session one is not kept)."""
    _set(request, response, secrets.token_urlsafe(32))


def end_session(request: Request, response: Response) -> None:
    """Forget the session id (at a logout)."""
    response.delete_cookie(COOKIE, path=cookie_path(request))


def _set(request: Request, response: Response, value: str) -> None:
    response.set_cookie(COOKIE, value, path=cookie_path(request), httponly=True,
                        samesite="lax", secure=request.url.scheme == "https")


def check_origin(request: Request) -> None:
    """Refuse (403) a POST whose Origin (or Referer) is not this site, is
    ``null``, or is missing."""
    origin, header = request.headers.get("origin"), "Origin"
    if origin is None:
        origin, header = request.headers.get("referer"), "Referer"
    if origin is None:
        raise CsrfError("the form was sent without an Origin or Referer header: "
                        "send it from the dashboard's own page")
    sent = normalize_origin(origin)
    own = own_origin(request.scope, {b"host": request.headers.get("host", "").encode("latin-1")})
    allowed: frozenset[str] = getattr(request.app.state, "allowed_origins", frozenset())
    if sent is None or (sent != own and sent not in allowed):
        raise CsrfError(f"the form was sent from another site (its {header} is not "
                        f"this dashboard's)")


def check(request: Request, submitted: Optional[str]) -> None:
    """Refuse (403) a POST from another origin or without the session's token."""
    check_origin(request)
    session = request.cookies.get(COOKIE, "")
    if not _WELL_FORMED.fullmatch(session) or not submitted:
        raise CsrfError(EXPIRED)
    expected = _sign(_secret(request), session, _identity(request))
    if not hmac.compare_digest(expected.encode("ascii"),
                               submitted.encode("utf-8", "surrogateescape")):
        raise CsrfError(EXPIRED)
