"""Cross-site request forgery protection for the dashboard's forms.

Two checks, both needed for a POST: the browser's ``Origin`` (when it sends
one) is this site, and the form carries the per-browser token that is also
kept in an HttpOnly cookie (another site can neither read the cookie nor
guess the token, so it cannot build a form that passes).
"""
from __future__ import annotations

import re
import secrets
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.responses import Response

from fornace.api.errors import Forbidden

COOKIE = "fornace_csrf"
FIELD = "csrf_token"
_WELL_FORMED = re.compile(r"[A-Za-z0-9_-]{32,64}")


class CsrfError(Forbidden):
    """A form that did not come from one of the dashboard's own pages."""


def token(request: Request) -> str:
    """The browser's token, made (and set as a cookie by :func:`keep`) when it has none."""
    existing = request.cookies.get(COOKIE, "")
    if _WELL_FORMED.fullmatch(existing):
        return existing
    made = getattr(request.state, "new_csrf", None)
    if made is None:
        made = request.state.new_csrf = secrets.token_urlsafe(32)
    return made


def keep(request: Request, response: Response) -> None:
    """Set the cookie of a token :func:`token` made for this request."""
    made = getattr(request.state, "new_csrf", None)
    if made is not None:
        response.set_cookie(COOKIE, made, path=request.scope.get("root_path") or "/",
                            httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")


def check(request: Request, submitted: str | None) -> None:
    """Refuse (403) a POST from another origin or without the browser's token."""
    origin = request.headers.get("origin")
    if origin and origin != "null":
        host = request.headers.get("host", "")
        if urlsplit(origin).netloc.lower() != host.lower():
            raise CsrfError("the form was sent from another site")
    expected = request.cookies.get(COOKIE, "")
    if not expected or not submitted or not secrets.compare_digest(expected, submitted):
        raise CsrfError("the form has expired or did not come from this dashboard: "
                        "reload the page and try again")
