"""Rendering pages: the Jinja2 templates, redirects after a POST, flash messages.

Every page gets the same frame values (where the dashboard is mounted, who is
logged in and what the policy lets them do, the form token, the message left
by the previous POST), so the routes only pass what their page shows.
"""
from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, unquote

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from fornace.api.dashboard import access, csrf, display, urls
from fornace.api.dashboard.login import uses_tokens
from fornace.common.resources import package_folder

TEMPLATES = package_folder("fornace.api.dashboard") / "templates"
FLASH_COOKIE = "fornace_flash"
_FLASH_LENGTH = 600  # a cookie holds ~4 KB; a long error message is cut

_jinja = Environment(loader=FileSystemLoader(str(TEMPLATES)),
                     autoescape=select_autoescape(["html", "svg"]),
                     trim_blocks=True, lstrip_blocks=True)


_jinja.filters["when"] = display.when     # every time on every page: one format
_jinja.globals["shown_status"] = display.shown_status
_jinja.globals["status_text"] = display.status_text
_jinja.globals["status_title"] = display.status_title
_jinja.globals["url"] = urls.link   # every link and form action: quoted segments


def base(request: Request) -> str:
    """The path the dashboard is mounted at (``/dashboard``), without a trailing slash."""
    return (request.scope.get("root_path") or "").rstrip("/")


def frame(request: Request) -> dict[str, Any]:
    """The values every template may use."""
    ctx = getattr(request.state, "ctx", None)
    return {"base": base(request), "csrf_field": csrf.FIELD, "csrf_token": csrf.token(request),
            "ctx": ctx, "keystone": uses_tokens(request.app.state.auth),
            "flash": read_flash(request), "path": request.url.path,
            "may": access.may(request)}


def fragment(request: Request, template: str, **values: Any) -> str:
    """A template rendered to text (a whole page or a live region)."""
    return _jinja.get_template(template).render(**frame(request), **values)


def render(request: Request, template: str, status: int = 200, **values: Any) -> HTMLResponse:
    """A page; consumes the flash message and sets the form token cookie if new."""
    response = HTMLResponse(fragment(request, template, **values), status_code=status)
    if request.cookies.get(FLASH_COOKIE):
        response.delete_cookie(FLASH_COOKIE, path=_cookie_path(request))
    csrf.keep(request, response)
    return response


def redirect(request: Request, path: str, message: str | None = None,
             level: str = "ok", live: bool = False) -> RedirectResponse:
    """303 to ``path`` (below the dashboard), with a message for the next page
    (``live``: it says a job started; see :func:`flash`)."""
    response = RedirectResponse(base(request) + path, status_code=303)
    if message:
        flash(request, response, message, level, live)
    return response


def flash(request: Request, response: Response, message: str, level: str = "ok",
          live: bool = False) -> None:
    """Leave ``message`` for the next page.  A ``live`` one says a job started
    ("Deployment started."): the page shows it while the job runs and, once it
    ended, the job's outcome instead when the page knows it (``outcome`` of its
    values); the progress script does the same when the job ends while the page
    is open, or drops the message where there is no outcome (the lists)."""
    text = message if len(message) <= _FLASH_LENGTH else message[:_FLASH_LENGTH - 1] + "…"
    response.set_cookie(FLASH_COOKIE, quote(json.dumps([level, text, live])),
                        path=_cookie_path(request), httponly=True, samesite="lax",
                        secure=request.url.scheme == "https")


def read_flash(request: Request) -> dict[str, Any] | None:
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw:
        return None
    try:
        level, text, *rest = json.loads(unquote(raw))
    except (ValueError, TypeError):
        return None
    if level not in ("ok", "error") or not isinstance(text, str):
        return None
    return {"level": level, "text": text, "live": rest == [True]}


def _cookie_path(request: Request) -> str:
    return request.scope.get("root_path") or "/"
