"""The dashboard as an ASGI app of its own, mounted by the API at ``/dashboard``.

A separate app so that its errors are pages (or JSON for the progress
script) while the JSON API keeps its error bodies, and so that its
security headers apply to its pages only.
"""
from __future__ import annotations

import logging
import secrets
from typing import Any, Optional
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from fornace.api.dashboard import urls
from fornace.api.dashboard.login import LoginRequired, forget_token
from fornace.api.dashboard.loginroutes import router as login_router
from fornace.api.dashboard.packagepages import router as package_router
from fornace.api.dashboard.pages import base, flash, render
from fornace.api.dashboard.pinpages import router as pin_router
from fornace.api.dashboard.routes import router
from fornace.api.dashboard.workflowpages import router as workflow_router
from fornace.api.errors import ApiError, Unauthorized
from fornace.api.stores.jobs import Jobs
from fornace.api.packages.store import Packages
from fornace.api.policy import Policy
from fornace.api.stores.store import Store
from fornace.api.packages.workflows import WorkflowFiles
from fornace.common.resources import package_folder

LOG = logging.getLogger(__name__)
STATIC = package_folder("fornace.api.dashboard") / "static"

SECURITY_HEADERS = {
    # everything from this site, nothing inline: an injected script cannot run
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


def create_dashboard(store: Store, jobs: Jobs, auth: Any, rules: Policy,
                     packages: Packages | None = None,
                     workflow_files: WorkflowFiles | None = None,
                     form_secret: Optional[bytes] = None,
                     allowed_origins: frozenset[str] = frozenset()) -> FastAPI:
    """The dashboard on the same Store, Jobs, authenticator, policy and workflow
    packages as the API (without ``packages`` its package pages say they are
    unavailable; without ``workflow_files``, the environments' workflow file pages).
    ``form_secret`` signs the form tokens (default: a random one, good while this
    app runs); forms may also come from the pages of ``allowed_origins``
    (:mod:`fornace.api.dashboard.csrf`)."""
    app = FastAPI(title="Fornace dashboard", openapi_url=None, docs_url=None, redoc_url=None)
    app.state.store, app.state.jobs, app.state.auth = store, jobs, auth
    app.state.policy, app.state.packages = rules, packages
    app.state.workflow_files = workflow_files
    app.state.form_secret = form_secret or secrets.token_bytes(32)
    app.state.allowed_origins = allowed_origins
    app.include_router(router)
    app.include_router(login_router)
    app.include_router(package_router)
    app.include_router(pin_router)
    app.include_router(workflow_router)
    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")
    _handle_errors(app)

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Any) -> Response:
        response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if not request.url.path.startswith(base(request) + "/static/"):
            response.headers.setdefault("Cache-Control", "no-store")
        return response
    return app


def _wants_json(request: Request) -> bool:
    return request.url.path.endswith("/live")


def _problem(request: Request, status: int, title: str, message: str) -> Response:
    if _wants_json(request):
        return JSONResponse({"error": {"code": status, "title": title, "message": message}},
                            status_code=status)
    return render(request, "error.html", status=status, title=title, message=message)


def _to_login(request: Request, reason: str, expired: bool = False) -> Response:
    """The login page, back to this page afterwards; ``expired``: the session's
    token is refused, so its cookie goes (the login page says why)."""
    if _wants_json(request):
        return _problem(request, 401, "Unauthorized", reason or "log in again")
    target = quote(request.url.path, safe="/")   # a path, its segments quoted
    response = RedirectResponse(base(request) + urls.path("login", next=target),
                                status_code=303)
    if reason:
        flash(request, response, reason, "error")
    if expired:
        forget_token(request, response)
    return response


def _handle_errors(app: FastAPI) -> None:
    @app.exception_handler(LoginRequired)
    async def login_required(request: Request, exc: LoginRequired) -> Response:
        return _to_login(request, exc.reason, exc.expired)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        if isinstance(exc, Unauthorized):
            return _to_login(request, exc.message)
        return _problem(request, exc.status, exc.title, exc.message)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        return _problem(request, 400, "Bad Request", "the request is not valid")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        title = {404: "Not Found", 405: "Method Not Allowed"}.get(exc.status_code, "Error")
        return _problem(request, exc.status_code, title, str(exc.detail))

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception) -> Response:
        LOG.exception("dashboard: unexpected error on %s %s", request.method, request.url.path)
        return _problem(request, 500, "Internal Server Error",
                        f"unexpected error: {type(exc).__name__}")
