"""The HTTP side of the API: routes (at ``/`` and ``/v1``), errors, limits.

Routes only translate HTTP to :class:`~fornace.api.store.Store` calls; the wire
shapes follow python-muranoclient 2.8 (``{"environments": […]}``, a bare
list for services, JSON error dicts).  The job routes (a Fornace extension)
are in :mod:`fornace.api.jobroutes`.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Iterable, Optional

from fastapi import APIRouter, Body, Depends, FastAPI, Query, Request
from oslo_policy import policy as oslo_policy
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from fornace.api import policy
from fornace.api.crossorigin import CrossOrigin, parse_allowed_origins
from fornace.api.dashboard import create_dashboard
from fornace.api.errors import ERROR_RESPONSES, ApiError, BadRequest, error_body
from fornace.api.routing import (SESSION_HEADER, EnvironmentIn, JsonRoute, flag, permitted, run,
                                 store_of)
from fornace.api.jobroutes import router as jobs_router
from fornace.api.packages.routes import router as packages_router
from fornace.api.modelroutes import router as model_router
from fornace.api.store import Context, Store
from fornace.api.typeroutes import router as types_router

if TYPE_CHECKING:
    from fornace.api.jobstore import Jobs
    from fornace.api.packages.store import Packages
    from fornace.api.packages.workflows import WorkflowFiles

LOG = logging.getLogger(__name__)


def _json(data: Any) -> Any:
    """A body taken as ``Any``: FastAPI passes a non-JSON content type's raw bytes."""
    if isinstance(data, bytes):
        raise BadRequest("the body must be JSON (Content-Type: application/json)")
    return data


router = APIRouter(route_class=JsonRoute, responses=ERROR_RESPONSES)
router.routes.extend(types_router.routes)   # GET /types, /types/{name}
router.routes.extend(model_router.routes)   # GET /environments/{env_id}/model


@router.get("/environments")
async def list_environments(request: Request, all_tenants: Optional[str] = Query(None),
                            tenant: Optional[str] = None,
                            ctx: Context = Depends(permitted("environment:list")),
                            store: Store = Depends(store_of)) -> dict:
    """The caller's environments; ``?tenant=ID`` another project's and
    ``?all_tenants=true`` every project's (``environment:list_all_tenants``,
    checked on that project, on an empty project id for all of them)."""
    tenant = tenant or None
    every = flag(all_tenants) and tenant is None
    if every or (tenant is not None and tenant != ctx.tenant_id):
        request.app.state.policy.authorize(ctx, "environment:list_all_tenants",
                                           "" if every else tenant)
    return {"environments": await run(store.list_environments, ctx, tenant, every)}


@router.post("/environments")
async def create_environment(body: EnvironmentIn,
                             ctx: Context = Depends(permitted("environment:create")),
                             store: Store = Depends(store_of)) -> dict:
    return await run(store.create_environment, ctx, body.name.strip())


@router.get("/environments/{env_id}")
async def show_environment(env_id: str, session_id: Optional[str] = SESSION_HEADER,
                           ctx: Context = Depends(permitted("environment:show")),
                           store: Store = Depends(store_of)) -> dict:
    return await run(store.get_environment, ctx, env_id, session_id)


@router.put("/environments/{env_id}")
async def update_environment(env_id: str, body: EnvironmentIn,
                             ctx: Context = Depends(permitted("environment:update")),
                             store: Store = Depends(store_of)) -> dict:
    return await run(store.update_environment, ctx, env_id, body.name.strip())


@router.delete("/environments/{env_id}")
async def delete_environment(env_id: str, abandon: Optional[str] = Query(None),
                             ctx: Context = Depends(permitted("environment:delete")),
                             store: Store = Depends(store_of)) -> Response:
    await run(store.delete_environment, ctx, env_id, flag(abandon))
    return Response(status_code=200)


@router.get("/environments/{env_id}/lastStatus")
async def last_status(env_id: str, session_id: Optional[str] = SESSION_HEADER,
                      ctx: Context = Depends(permitted("environment:last_status")),
                      store: Store = Depends(store_of)) -> dict:
    return {"lastStatuses": await run(store.last_status, ctx, env_id, session_id)}


@router.post("/environments/{env_id}/configure")
async def configure(env_id: str, ctx: Context = Depends(permitted("session:configure")),
                    store: Store = Depends(store_of)) -> dict:
    return await run(store.configure, ctx, env_id)


@router.get("/environments/{env_id}/sessions/{session_id}")
async def show_session(env_id: str, session_id: str,
                       ctx: Context = Depends(permitted("session:show")),
                       store: Store = Depends(store_of)) -> dict:
    return await run(store.get_session, ctx, env_id, session_id)


@router.delete("/environments/{env_id}/sessions/{session_id}")
async def delete_session(env_id: str, session_id: str,
                         ctx: Context = Depends(permitted("session:delete")),
                         store: Store = Depends(store_of)) -> Response:
    await run(store.delete_session, ctx, env_id, session_id)
    return Response(status_code=200)


@router.post("/environments/{env_id}/sessions/{session_id}/deploy")
async def deploy(env_id: str, session_id: str,
                 change_detection: Optional[str] = Query(
                     None, description="evaluate (default), always or skip: whether "
                                       "deployed units are reconfigured when their "
                                       "configuration changed"),
                 ctx: Context = Depends(permitted("session:deploy")),
                 store: Store = Depends(store_of)) -> Response:
    await run(store.deploy, ctx, env_id, session_id, change_detection)
    return Response(status_code=200)


@router.get("/environments/{env_id}/services{path:path}")
async def get_services(env_id: str, path: str, session_id: Optional[str] = SESSION_HEADER,
                       ctx: Context = Depends(permitted("service:show")),
                       store: Store = Depends(store_of)) -> Any:
    return await run(store.get_services, ctx, env_id, path, session_id)


@router.post("/environments/{env_id}/services{path:path}")
async def post_services(env_id: str, path: str, data: Any = Body(...),
                        session_id: Optional[str] = SESSION_HEADER,
                        ctx: Context = Depends(permitted("service:create")),
                        store: Store = Depends(store_of)) -> Any:
    return await run(store.post_service, ctx, env_id, path, _json(data), session_id)


@router.put("/environments/{env_id}/services{path:path}")
async def put_services(env_id: str, path: str, data: Any = Body(...),
                       session_id: Optional[str] = SESSION_HEADER,
                       ctx: Context = Depends(permitted("service:update")),
                       store: Store = Depends(store_of)) -> Any:
    return await run(store.put_service, ctx, env_id, path, _json(data), session_id)


@router.delete("/environments/{env_id}/services{path:path}")
async def delete_services(env_id: str, path: str, session_id: Optional[str] = SESSION_HEADER,
                          ctx: Context = Depends(permitted("service:delete")),
                          store: Store = Depends(store_of)) -> Response:
    await run(store.delete_service, ctx, env_id, path, session_id)
    return Response(status_code=200)


@router.get("/environments/{env_id}/deployments")
async def environment_deployments(env_id: str,
                                  ctx: Context = Depends(permitted("deployment:list")),
                                  store: Store = Depends(store_of)) -> dict:
    return {"deployments": await run(store.list_deployments, ctx, env_id)}


@router.get("/environments/{env_id}/deployments/{deployment_id}")
async def deployment_reports(env_id: str, deployment_id: str, request: Request,
                             ctx: Context = Depends(permitted("deployment:show")),
                             store: Store = Depends(store_of)) -> dict:
    service_ids = request.query_params.getlist("service_id")
    return {"reports": await run(store.reports, ctx, env_id, deployment_id, service_ids)}


@router.get("/deployments")
async def all_deployments(ctx: Context = Depends(permitted("deployment:list")),
                          store: Store = Depends(store_of)) -> dict:
    return {"deployments": await run(store.list_deployments, ctx)}


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


def create_app(store: Store, auth: Any, max_body_size: int = 1024 * 1024,
               jobs: Optional["Jobs"] = None, allowed_origins: Iterable[str] = (),
               enforcer: Optional[oslo_policy.Enforcer] = None,
               packages: Optional["Packages"] = None,
               workflow_files: Optional["WorkflowFiles"] = None) -> FastAPI:
    """The web app on ``store``; ``jobs`` (an :class:`fornace.api.jobstore.Jobs`) defaults
    to one on the same store.  ``allowed_origins``: the web origins besides the API's
    own whose pages may send it changes (:mod:`fornace.api.crossorigin`).
    ``enforcer``: the access rules (:func:`fornace.api.policy.enforcer`; default:
    the rules' defaults, no policy file), for the API and the dashboard alike.
    ``packages``: the workflow packages (:mod:`fornace.api.packages.store`; default: on
    the store's database, without a checker, so refusing uploads); their uploads
    may be up to its ``limits.max_bytes``, other bodies ``max_body_size``.
    ``workflow_files``: the environments' workflow files for the dashboard's
    pages of them (:mod:`fornace.api.packages.workflows`; None: those pages say so)."""
    from fornace.api.jobstore import Jobs
    from fornace.api.packages.pins import Pins
    from fornace.api.packages.store import Packages

    origins = parse_allowed_origins(allowed_origins)  # malformed: an error now, not later
    app = FastAPI(title="Fornace API",
                  description="Environments, configuration sessions, services and "
                              "deployments (Murano 0.2 compatible), and jobs.",
                  version="0.2")
    app.state.store = store
    app.state.jobs = jobs if jobs is not None else Jobs(store)
    app.state.packages = packages if packages is not None else Packages(store.sessions)
    app.state.pins = Pins(store, app.state.packages)
    app.state.auth = auth
    app.state.policy = policy.Policy(enforcer if enforcer is not None else policy.enforcer())
    for prefix in ("", "/v1"):
        app.include_router(router, prefix=prefix)
        app.include_router(jobs_router, prefix=prefix)
        app.include_router(packages_router, prefix=prefix)
    # the web dashboard: HTML pages on the same store, jobs and authentication
    app.mount("/dashboard", create_dashboard(store, app.state.jobs, auth, app.state.policy,
                                             app.state.packages, workflow_files))

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
    return app
