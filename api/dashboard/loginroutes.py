"""The dashboard's login and logout.

``noauth`` mode: the login form names a project and a user, checked by the
API's authenticator and kept in cookies.  Keystone mode: a password login
(user, project and their domains) whose token is kept in a cookie and revoked
at logout.  After a login the browser goes back to the dashboard page it
came from (``?next=``), never to another site.
"""
from __future__ import annotations

import re

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from fornace.api.auth import KeystoneAuth
from fornace.api.dashboard import csrf, login, passwordlogin
from fornace.api.dashboard.formdata import Form, read_form
from fornace.api.dashboard.pages import base, redirect, render

router = APIRouter()
_QUOTED_PATH = re.compile(r"[A-Za-z0-9/%._~!$&'()*+,;=:@?-]*")


def _next(request: Request, target: str) -> str:
    """A path of the dashboard to go to after the login (never another site;
    only the characters a quoted path and query have)."""
    prefix = base(request) + "/"
    if (target.startswith(prefix) and not target.startswith("//")
            and _QUOTED_PATH.fullmatch(target)):
        return target[len(base(request)):]
    return "/"


@router.get("/login")
async def login_page(request: Request, target: str = Query("", alias="next")) -> Response:
    auth = request.app.state.auth
    cookies = request.cookies
    return render(request, "login.html", next=target, error=None,
                  who=_login_fields(login.last_login(request)),
                  tenant=cookies.get(login.TENANT_COOKIE) or getattr(auth, "default_tenant", ""),
                  user=cookies.get(login.USER_COOKIE) or getattr(auth, "default_user", ""))


def _login_fields(values: dict[str, str]) -> dict[str, str]:
    """The keystone login form's values (the domains default to Keystone's default)."""
    return {"username": "", "project": "", "user_domain": passwordlogin.DEFAULT_DOMAIN,
            "project_domain": passwordlogin.DEFAULT_DOMAIN,
            **{name: value for name, value in values.items() if value}}


@router.post("/login")
async def log_in(request: Request) -> Response:
    form = await read_form(request)
    auth = request.app.state.auth
    if login.uses_tokens(auth):
        return await _keystone_login(request, form, auth)
    values = {login.TENANT_COOKIE: form.get("tenant").strip(),
              login.USER_COOKIE: form.get("user").strip()}
    headers = {"x-tenant-id": values[login.TENANT_COOKIE],
               "x-user-id": values[login.USER_COOKIE]}
    try:
        if not all(values.values()):
            raise login.LoginRequired("every field is required")
        await login.authenticate(auth, headers)
    except login.LoginRequired as exc:
        return render(request, "login.html", status=401, next=form.get("next"),
                      error=exc.reason or "the login was refused",
                      tenant=form.get("tenant"), user=form.get("user"))
    response = redirect(request, _next(request, form.get("next")))
    login.remember(request, response, values)
    csrf.new_session(request, response)
    return response


async def _keystone_login(request: Request, form: Form, auth: KeystoneAuth) -> Response:
    """A password login: the token in its cookie, or the form again with why
    (what was typed kept, the password excepted)."""
    who = passwordlogin.Credentials.of(form)
    try:
        token, ctx = await passwordlogin.log_in(auth, who, form.get("password"))
    except passwordlogin.LoginRefused as exc:
        return render(request, "login.html", status=exc.status, next=form.get("next"),
                      error=exc.message, who=_login_fields(who.fields()))
    response = redirect(request, _next(request, form.get("next")))
    login.remember_token(request, response, token, ctx.expires_at, who.fields())
    csrf.new_session(request, response)
    return response


@router.post("/logout")
async def log_out(request: Request) -> Response:
    """Log out (keystone: the token is revoked) and show the login page."""
    await read_form(request)
    auth = request.app.state.auth
    message, level = "You are logged out.", "ok"
    token = request.cookies.get(login.TOKEN_COOKIE)
    if login.uses_tokens(auth) and token:
        problem = await passwordlogin.log_out(auth, token)
        if problem:
            message, level = f"You are logged out here, but {problem}", "error"
    response = redirect(request, "/login", message, level)
    login.forget(request, response)
    csrf.end_session(request, response)
    return response
