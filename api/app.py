"""The API's web app: its routes (at ``/`` and ``/v1``), the dashboard, version
discovery, the health check, request ids, errors and body limits.

The routes live in their own modules and only translate HTTP to store
calls: the Murano 0.2 ones in :mod:`fornace.api.muranoroutes`, the jobs in
:mod:`fornace.api.jobroutes`, the workflow packages in
:mod:`fornace.api.packages.routes`, the dead letters in
:mod:`fornace.api.deadletterroutes`; version discovery (``GET /``, ``/v1/``) in
:mod:`fornace.api.versions`, ``/healthcheck`` in :mod:`fornace.api.healthcheck`.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Iterable, Optional

from fastapi import FastAPI, Request
from oslo_policy import policy as oslo_policy
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from oslo_config import cfg
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from fornace.api import policy
from fornace.api.crossorigin import CrossOrigin, parse_allowed_origins
from fornace.api.dashboard import create_dashboard
from fornace.api.deadletterroutes import router as dead_letters_router
from fornace.api.errors import ApiError, error_body
from fornace.api import healthcheck
from fornace.api.hosts import AllowedHosts, HostCheck, allowed_hosts as default_hosts
from fornace.api.jobroutes import router as jobs_router
from fornace.api.muranoroutes import router as murano_router
from fornace.api.packages.routes import router as packages_router
from fornace.api.requestids import RequestIds
from fornace.api.versions import router as versions_router
from fornace.api.stores.store import Store
from fornace.common.db.outages import transient

if TYPE_CHECKING:
    from fornace.api.stores.jobs import Jobs
    from fornace.api.packages.store import Packages
    from fornace.api.packages.workflows import WorkflowFiles

LOG = logging.getLogger(__name__)
RETRY_AFTER = 2   # seconds a client is told to wait when the database is out of reach


class BodyLimit:
    """ASGI middleware: a 413 JSON error for bodies above ``limit`` bytes, or the
    limit ``larger`` gives the request's exact path (package uploads)."""

    def __init__(self, app: Any, limit: int, larger: Optional[dict[str, int]] = None) -> None:
        self.app = app
        self.limit = limit
        self.larger = larger or {}

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.larger.get(scope.get("path", ""), self.limit)
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._too_large(scope, receive, send, limit)
            return
        seen = 0

        async def limited_receive() -> dict:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge(limit)
            return message

        try:
            await self.app(scope, limited_receive, send)
        except _TooLarge:
            await self._too_large(scope, receive, send, limit)

    async def _too_large(self, scope: dict, receive: Any, send: Any, limit: int) -> None:
        response = JSONResponse(error_body(413, "Request Entity Too Large",
                                           f"the request body is larger than {limit} bytes"),
                                status_code=413)
        await response(scope, receive, send)


class _TooLarge(StarletteHTTPException):
    """Raised while the body is read: an HTTPException, so FastAPI's body parsing
    lets it through (any other exception there becomes a 400)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than {limit} bytes")


def _describe_validation(exc: RequestValidationError) -> str:
    parts = []
    for error in exc.errors():
        location = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        if error.get("type") == "json_invalid":
            context = error.get("ctx") or {}
            parts.append(f"malformed JSON body: {context.get('error', error.get('msg'))}")
        else:
            parts.append(f"{location}: {error.get('msg')}")
    return "; ".join(parts) or "invalid request"


class FornaceApi(FastAPI):
    """FastAPI, with :class:`fornace.api.requestids.RequestIds` around all of it:
    the answers Starlette's own outermost middleware makes (the 500 of an
    unexpected error) carry the request id too."""

    def build_middleware_stack(self) -> Any:
        return RequestIds(super().build_middleware_stack())


def create_app(store: Store, auth: Any, max_body_size: int = 1024 * 1024,
               jobs: Optional["Jobs"] = None, allowed_origins: Iterable[str] = (),
               enforcer: Optional[oslo_policy.Enforcer] = None,
               packages: Optional["Packages"] = None,
               workflow_files: Optional["WorkflowFiles"] = None,
               allowed_hosts: Optional[AllowedHosts] = None,
               form_secret: Optional[bytes] = None,
               public_endpoint: Optional[str] = None,
               healthcheck_conf: Optional[cfg.ConfigOpts] = None) -> FastAPI:
    """The web app on ``store``; ``jobs`` (an :class:`fornace.api.stores.jobs.Jobs`) defaults
    to one on the same store.  ``allowed_origins``: the web origins besides the API's
    own whose pages may send it changes (:mod:`fornace.api.crossorigin`).
    ``enforcer``: the access rules (:func:`fornace.api.policy.enforcer`; default:
    the rules' defaults, no policy file), for the API and the dashboard alike.
    ``packages``: the workflow packages (:mod:`fornace.api.packages.store`; default: on
    the store's database, without a checker, so refusing uploads); their uploads
    may be up to its ``limits.max_bytes``, other bodies ``max_body_size``.
    ``workflow_files``: the environments' workflow files for the dashboard's
    pages of them (:mod:`fornace.api.packages.workflows`; None: those pages say so).
    ``allowed_hosts``: the Host headers served (:mod:`fornace.api.hosts`; default:
    the loopback names only).  ``form_secret``: what the dashboard signs its form
    tokens with (:mod:`fornace.api.dashboard.csrf`; default: a random one of this
    app, so tokens do not outlive it).  ``public_endpoint``: the URL version
    discovery links to (:mod:`fornace.api.versions`; default: the URL each
    request reached).  ``healthcheck_conf``: the ``[healthcheck]`` options of
    ``/healthcheck`` (:mod:`fornace.api.healthcheck`; default: theirs)."""
    from fornace.api.stores.jobs import Jobs
    from fornace.api.packages.store import Packages
    from fornace.api.packages.names import PackageNames
    from fornace.api.packages.pins import Pins

    origins = parse_allowed_origins(allowed_origins)  # malformed: an error now, not later
    app = FornaceApi(title="Fornace API",
                     description="Environments, configuration sessions, services and "
                                 "deployments (Murano 0.2 compatible), and jobs.",
                     version="0.2")
    app.state.store = store
    app.state.jobs = jobs if jobs is not None else Jobs(store)
    app.state.packages = packages if packages is not None else Packages(store.sessions)
    app.state.pins = Pins(store, app.state.packages)
    app.state.package_names = PackageNames(store.sessions)
    app.state.workflow_files = workflow_files     # for /environments/{id}/why
    app.state.auth = auth
    app.state.policy = policy.Policy(enforcer if enforcer is not None else policy.enforcer())
    app.state.public_endpoint = public_endpoint
    # GET /, /v1/: version discovery; /healthcheck: oslo.middleware's, unauthenticated
    app.include_router(versions_router)
    app.router.routes.append(Route(healthcheck.PATH, healthcheck.healthcheck_app(healthcheck_conf),
                                   methods=["GET", "HEAD"], include_in_schema=False))
    for prefix in ("", "/v1"):
        app.include_router(murano_router, prefix=prefix)
        app.include_router(jobs_router, prefix=prefix)
        app.include_router(packages_router, prefix=prefix)
        app.include_router(dead_letters_router, prefix=prefix)
    # the web dashboard: HTML pages on the same store, jobs and authentication
    app.mount("/dashboard", create_dashboard(store, app.state.jobs, auth, app.state.policy,
                                             app.state.packages, workflow_files,
                                             form_secret=form_secret,
                                             allowed_origins=origins))

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.status, exc.title, exc.message, exc.details),
                            status_code=exc.status, headers=exc.headers or None)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(400, "Bad Request", _describe_validation(exc)),
                            status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        title = {404: "Not Found", 405: "Method Not Allowed",
                 413: "Request Entity Too Large"}.get(exc.status_code, "Error")
        return JSONResponse(error_body(exc.status_code, title, str(exc.detail)),
                            status_code=exc.status_code)

    @app.exception_handler(SQLAlchemyError)
    async def database_error(request: Request, exc: SQLAlchemyError) -> JSONResponse:
        if not transient(exc):
            raise exc          # a bug: the 500 below
        # the database out of reach, or a failover under way: nothing is wrong
        # with the request, it may be sent again
        LOG.warning("%s %s: the database is out of reach: %s", request.method,
                    request.url.path, str(exc).splitlines()[0][:200])
        return JSONResponse(error_body(503, "Service Unavailable",
                                       "the database is out of reach for a moment; try again"),
                            status_code=503, headers={"Retry-After": str(RETRY_AFTER)})

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception) -> JSONResponse:
        LOG.exception("unexpected error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body(500, "Internal Server Error",
                                       f"unexpected error: {type(exc).__name__}"),
                            status_code=500)

    package_bytes = app.state.packages.limits.max_bytes
    app.add_middleware(BodyLimit, limit=max_body_size,
                       larger={"/packages": package_bytes, "/v1/packages": package_bytes,
                               "/dashboard/packages/new": package_bytes})
    # outermost: a cross-site request is refused before anything reads its body
    app.add_middleware(CrossOrigin, allowed=origins)
    # before everything: a request for another host (DNS rebinding) is not served;
    # but for a load balancer's health check (by the API's address), unless it
    # shows details
    app.add_middleware(HostCheck,
                       allowed=allowed_hosts if allowed_hosts is not None else default_hosts(),
                       exempt=() if healthcheck.detailed(healthcheck_conf)
                       else (healthcheck.PATH,))
    return app
