"""The HTTP side of the API: routes (at ``/`` and ``/v1``), errors, limits.

Routes only translate HTTP to :class:`~api.store.Store` calls; the wire
shapes follow python-muranoclient 2.8 (``{"environments": […]}``, a bare
list for services, JSON error dicts).
"""
from __future__ import annotations

import logging
from typing import Any, Optional

from fastapi import APIRouter, Body, Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from .errors import ApiError, Forbidden, error_body
from .store import Context, Store

LOG = logging.getLogger(__name__)
SESSION_HEADER = Header(None, alias="X-Configuration-Session",
                        description="ID of a configuration session of this environment")


class EnvironmentIn(BaseModel):
    """Create or rename an environment."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=255, pattern=r"\S")


def _context(request: Request) -> Context:
    return request.app.state.auth.context(request.headers)


def _store(request: Request) -> Store:
    return request.app.state.store


def _flag(value: Optional[str]) -> bool:
    return (value or "").lower() in ("1", "true", "yes", "on")


router = APIRouter()


@router.get("/environments")
def list_environments(all_tenants: Optional[str] = Query(None), tenant: Optional[str] = None,
                      ctx: Context = Depends(_context), store: Store = Depends(_store)) -> dict:
    if _flag(all_tenants) or (tenant and tenant != ctx.tenant_id):
        if not ctx.is_admin:
            raise Forbidden("listing other tenants' environments needs the admin role")
        if tenant:
            ctx = Context(tenant_id=tenant, user_id=ctx.user_id, token=ctx.token, is_admin=True)
    return {"environments": store.list_environments(ctx)}


@router.post("/environments")
def create_environment(body: EnvironmentIn, ctx: Context = Depends(_context),
                       store: Store = Depends(_store)) -> dict:
    return store.create_environment(ctx, body.name.strip())


@router.get("/environments/{env_id}")
def show_environment(env_id: str, session_id: Optional[str] = SESSION_HEADER,
                     ctx: Context = Depends(_context), store: Store = Depends(_store)) -> dict:
    return store.get_environment(ctx, env_id, session_id)


@router.put("/environments/{env_id}")
def update_environment(env_id: str, body: EnvironmentIn, ctx: Context = Depends(_context),
                       store: Store = Depends(_store)) -> dict:
    return store.update_environment(ctx, env_id, body.name.strip())


@router.delete("/environments/{env_id}")
def delete_environment(env_id: str, abandon: Optional[str] = Query(None),
                       ctx: Context = Depends(_context),
                       store: Store = Depends(_store)) -> Response:
    store.delete_environment(ctx, env_id, _flag(abandon))
    return Response(status_code=200)


@router.get("/environments/{env_id}/lastStatus")
def last_status(env_id: str, session_id: Optional[str] = SESSION_HEADER,
                ctx: Context = Depends(_context), store: Store = Depends(_store)) -> dict:
    return {"lastStatuses": store.last_status(ctx, env_id, session_id)}


@router.post("/environments/{env_id}/configure")
def configure(env_id: str, ctx: Context = Depends(_context),
              store: Store = Depends(_store)) -> dict:
    return store.configure(ctx, env_id)


@router.get("/environments/{env_id}/sessions/{session_id}")
def show_session(env_id: str, session_id: str, ctx: Context = Depends(_context),
                 store: Store = Depends(_store)) -> dict:
    return store.get_session(ctx, env_id, session_id)


@router.delete("/environments/{env_id}/sessions/{session_id}")
def delete_session(env_id: str, session_id: str, ctx: Context = Depends(_context),
                   store: Store = Depends(_store)) -> Response:
    store.delete_session(ctx, env_id, session_id)
    return Response(status_code=200)


@router.post("/environments/{env_id}/sessions/{session_id}/deploy")
def deploy(env_id: str, session_id: str, ctx: Context = Depends(_context),
           store: Store = Depends(_store)) -> Response:
    store.deploy(ctx, env_id, session_id)
    return Response(status_code=200)


@router.get("/environments/{env_id}/services{path:path}")
def get_services(env_id: str, path: str, session_id: Optional[str] = SESSION_HEADER,
                 ctx: Context = Depends(_context), store: Store = Depends(_store)) -> Any:
    return store.get_services(ctx, env_id, path, session_id)


@router.post("/environments/{env_id}/services{path:path}")
def post_services(env_id: str, path: str, data: Any = Body(...),
                  session_id: Optional[str] = SESSION_HEADER, ctx: Context = Depends(_context),
                  store: Store = Depends(_store)) -> Any:
    return store.post_service(ctx, env_id, path, data, session_id)


@router.put("/environments/{env_id}/services{path:path}")
def put_services(env_id: str, path: str, data: Any = Body(...),
                 session_id: Optional[str] = SESSION_HEADER, ctx: Context = Depends(_context),
                 store: Store = Depends(_store)) -> Any:
    return store.put_service(ctx, env_id, path, data, session_id)


@router.delete("/environments/{env_id}/services{path:path}")
def delete_services(env_id: str, path: str, session_id: Optional[str] = SESSION_HEADER,
                    ctx: Context = Depends(_context),
                    store: Store = Depends(_store)) -> Response:
    store.delete_service(ctx, env_id, path, session_id)
    return Response(status_code=200)


@router.get("/environments/{env_id}/deployments")
def environment_deployments(env_id: str, ctx: Context = Depends(_context),
                            store: Store = Depends(_store)) -> dict:
    return {"deployments": store.list_deployments(ctx, env_id)}


@router.get("/environments/{env_id}/deployments/{deployment_id}")
def deployment_reports(env_id: str, deployment_id: str, request: Request,
                       ctx: Context = Depends(_context), store: Store = Depends(_store)) -> dict:
    service_ids = request.query_params.getlist("service_id")
    return {"reports": store.reports(ctx, env_id, deployment_id, service_ids)}


@router.get("/deployments")
def all_deployments(ctx: Context = Depends(_context), store: Store = Depends(_store)) -> dict:
    return {"deployments": store.list_deployments(ctx)}


class BodyLimit:
    """ASGI middleware: a 413 JSON error for bodies above ``limit`` bytes."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._too_large(scope, receive, send)
            return
        seen = 0

        async def limited_receive() -> dict:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge()
            return message

        try:
            await self.app(scope, limited_receive, send)
        except _TooLarge:
            await self._too_large(scope, receive, send)

    async def _too_large(self, scope: dict, receive: Any, send: Any) -> None:
        response = JSONResponse(error_body(413, "Request Entity Too Large",
                                           f"the request body is larger than {self.limit} bytes"),
                                status_code=413)
        await response(scope, receive, send)


class _TooLarge(Exception):
    pass


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


def create_app(store: Store, auth: Any, max_body_size: int = 1024 * 1024) -> FastAPI:
    app = FastAPI(title="Fornace API",
                  description="Environments, configuration sessions, services and "
                              "deployments (Murano 0.2 compatible).",
                  version="0.2")
    app.state.store = store
    app.state.auth = auth
    app.include_router(router)
    app.include_router(router, prefix="/v1")

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.status, exc.title, exc.message),
                            status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(400, "Bad Request", _describe_validation(exc)),
                            status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        title = {404: "Not Found", 405: "Method Not Allowed"}.get(exc.status_code, "Error")
        return JSONResponse(error_body(exc.status_code, title, str(exc.detail)),
                            status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception) -> JSONResponse:
        LOG.exception("unexpected error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body(500, "Internal Server Error",
                                       f"unexpected error: {type(exc).__name__}"),
                            status_code=500)

    app.add_middleware(BodyLimit, limit=max_body_size)
    return app
