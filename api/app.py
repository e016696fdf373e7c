"""The HTTP side of the API: routes (at ``/`` and ``/v1``), errors, limits.

Routes only translate HTTP to :class:`~fornace.api.store.Store` calls; the wire
shapes follow python-muranoclient 2.8 (``{"environments": […]}``, a bare
list for services, JSON error dicts).  The job routes (a Fornace extension)
are in :mod:`fornace.api.jobroutes`.
"""
from __future__ import annotations

import json
import logging
import math
import re
from typing import TYPE_CHECKING, Any, Callable, Optional

from fastapi import APIRouter, Body, Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from fornace.api.auth import NoAuth
from fornace.api.errors import ApiError, BadRequest, Forbidden, error_body
from fornace.api.store import Context, Store

if TYPE_CHECKING:
    from fornace.api.jobstore import Jobs

LOG = logging.getLogger(__name__)
SESSION_HEADER = Header(None, alias="X-Configuration-Session",
                        description="ID of a configuration session of this environment")


class EnvironmentIn(BaseModel):
    """Create or rename an environment."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=255, pattern=r"\S")

    @field_validator("name")
    @classmethod
    def _no_nul(cls, name: str) -> str:
        if "\x00" in name:  # PostgreSQL text cannot hold it
            raise ValueError("must not contain NUL characters")
        return name


# The routes are ``async``: FastAPI then resolves the dependencies and
# validates and serialises the response on the event loop, and only the Store
# call (blocking database I/O) goes to the thread pool -- one hop per request
# instead of one per dependency, one for the endpoint and one for the response.

async def _context(request: Request) -> Context:
    auth = request.app.state.auth
    if type(auth) is NoAuth:  # headers only: nothing that blocks
        return auth.context(request.headers)
    return await run_in_threadpool(auth.context, request.headers)  # e.g. a Keystone call


async def _store(request: Request) -> Store:
    return request.app.state.store


_run = run_in_threadpool


def _flag(value: Optional[str]) -> bool:
    return (value or "").lower() in ("1", "true", "yes", "on")


MAX_JSON_DEPTH = 64  # service objects nest a few levels; deep input only breaks recursion
_SURROGATE = re.compile("[\ud800-\udfff]")


def parse_json(body: bytes) -> Any:
    """A request body as JSON, strictly: only what can be stored and sent back.

    Python's parser also takes ``NaN``/``Infinity``, numbers that overflow to
    ``inf`` (``1e999``), escaped unpaired surrogates (``"\\ud800"``: not
    text, no UTF-8 encoder takes them) and any nesting; stored, each of them
    later broke the JSON encoders or the recursive code (``copy.deepcopy``).
    Here they are a malformed body (400), like every other parse error.
    """
    try:
        value = json.loads(body, parse_constant=_no_constant, parse_float=_finite_float)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise _malformed(f"nested more than {MAX_JSON_DEPTH} levels deep") from None
    except ValueError as exc:  # not UTF-8/16/32, NaN, 1e999, an integer of 5000 digits
        raise _malformed(str(exc)) from None
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise _malformed("a string holds an unpaired surrogate (\\ud800-\\udfff)")
        elif isinstance(item, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise _malformed(f"nested more than {MAX_JSON_DEPTH} levels deep")
            if isinstance(item, dict):
                pending.extend((key, depth) for key in item)
                item = item.values()
            pending.extend((child, depth + 1) for child in item)
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"number {text[:40]} is out of range")
    return number


def _malformed(message: str) -> json.JSONDecodeError:
    return json.JSONDecodeError(message, "", 0)


class JsonRequest(Request):
    """A request whose JSON body is read with :func:`parse_json`."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class JsonRoute(APIRoute):
    """A route that parses JSON bodies with :func:`parse_json`."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def strict_json_handler(request: Request) -> Response:
            return await handler(JsonRequest(request.scope, request.receive))
        return strict_json_handler


def _json(data: Any) -> Any:
    """A body taken as ``Any``: FastAPI passes a non-JSON content type's raw bytes."""
    if isinstance(data, bytes):
        raise BadRequest("the body must be JSON (Content-Type: application/json)")
    return data


router = APIRouter(route_class=JsonRoute)


@router.get("/environments")
async def list_environments(all_tenants: Optional[str] = Query(None),
                            tenant: Optional[str] = None, ctx: Context = Depends(_context),
                            store: Store = Depends(_store)) -> dict:
    if _flag(all_tenants) or (tenant and tenant != ctx.tenant_id):
        if not ctx.is_admin:
            raise Forbidden("listing other tenants' environments needs the admin role")
        if tenant:
            ctx = Context(tenant_id=tenant, user_id=ctx.user_id, token=ctx.token, is_admin=True)
    return {"environments": await _run(store.list_environments, ctx)}


@router.post("/environments")
async def create_environment(body: EnvironmentIn, ctx: Context = Depends(_context),
                             store: Store = Depends(_store)) -> dict:
    return await _run(store.create_environment, ctx, body.name.strip())


@router.get("/environments/{env_id}")
async def show_environment(env_id: str, session_id: Optional[str] = SESSION_HEADER,
                           ctx: Context = Depends(_context),
                           store: Store = Depends(_store)) -> dict:
    return await _run(store.get_environment, ctx, env_id, session_id)


@router.put("/environments/{env_id}")
async def update_environment(env_id: str, body: EnvironmentIn,
                             ctx: Context = Depends(_context),
                             store: Store = Depends(_store)) -> dict:
    return await _run(store.update_environment, ctx, env_id, body.name.strip())


@router.delete("/environments/{env_id}")
async def delete_environment(env_id: str, abandon: Optional[str] = Query(None),
                             ctx: Context = Depends(_context),
                             store: Store = Depends(_store)) -> Response:
    await _run(store.delete_environment, ctx, env_id, _flag(abandon))
    return Response(status_code=200)


@router.get("/environments/{env_id}/lastStatus")
async def last_status(env_id: str, session_id: Optional[str] = SESSION_HEADER,
                      ctx: Context = Depends(_context), store: Store = Depends(_store)) -> dict:
    return {"lastStatuses": await _run(store.last_status, ctx, env_id, session_id)}


@router.post("/environments/{env_id}/configure")
async def configure(env_id: str, ctx: Context = Depends(_context),
                    store: Store = Depends(_store)) -> dict:
    return await _run(store.configure, ctx, env_id)


@router.get("/environments/{env_id}/sessions/{session_id}")
async def show_session(env_id: str, session_id: str, ctx: Context = Depends(_context),
                       store: Store = Depends(_store)) -> dict:
    return await _run(store.get_session, ctx, env_id, session_id)


@router.delete("/environments/{env_id}/sessions/{session_id}")
async def delete_session(env_id: str, session_id: str, ctx: Context = Depends(_context),
                         store: Store = Depends(_store)) -> Response:
    await _run(store.delete_session, ctx, env_id, session_id)
    return Response(status_code=200)


@router.post("/environments/{env_id}/sessions/{session_id}/deploy")
async def deploy(env_id: str, session_id: str,
                 change_detection: Optional[str] = Query(
                     None, description="evaluate (default), always or skip: whether "
                                       "deployed units are reconfigured when their "
                                       "configuration changed"),
                 ctx: Context = Depends(_context), store: Store = Depends(_store)) -> Response:
    await _run(store.deploy, ctx, env_id, session_id, change_detection)
    return Response(status_code=200)


@router.get("/environments/{env_id}/services{path:path}")
async def get_services(env_id: str, path: str, session_id: Optional[str] = SESSION_HEADER,
                       ctx: Context = Depends(_context),
                       store: Store = Depends(_store)) -> Any:
    return await _run(store.get_services, ctx, env_id, path, session_id)


@router.post("/environments/{env_id}/services{path:path}")
async def post_services(env_id: str, path: str, data: Any = Body(...),
                        session_id: Optional[str] = SESSION_HEADER,
                        ctx: Context = Depends(_context),
                        store: Store = Depends(_store)) -> Any:
    return await _run(store.post_service, ctx, env_id, path, _json(data), session_id)


@router.put("/environments/{env_id}/services{path:path}")
async def put_services(env_id: str, path: str, data: Any = Body(...),
                       session_id: Optional[str] = SESSION_HEADER,
                       ctx: Context = Depends(_context),
                       store: Store = Depends(_store)) -> Any:
    return await _run(store.put_service, ctx, env_id, path, _json(data), session_id)


@router.delete("/environments/{env_id}/services{path:path}")
async def delete_services(env_id: str, path: str, session_id: Optional[str] = SESSION_HEADER,
                          ctx: Context = Depends(_context),
                          store: Store = Depends(_store)) -> Response:
    await _run(store.delete_service, ctx, env_id, path, session_id)
    return Response(status_code=200)


@router.get("/environments/{env_id}/deployments")
async def environment_deployments(env_id: str, ctx: Context = Depends(_context),
                                  store: Store = Depends(_store)) -> dict:
    return {"deployments": await _run(store.list_deployments, ctx, env_id)}


@router.get("/environments/{env_id}/deployments/{deployment_id}")
async def deployment_reports(env_id: str, deployment_id: str, request: Request,
                             ctx: Context = Depends(_context),
                             store: Store = Depends(_store)) -> dict:
    service_ids = request.query_params.getlist("service_id")
    return {"reports": await _run(store.reports, ctx, env_id, deployment_id, service_ids)}


@router.get("/deployments")
async def all_deployments(ctx: Context = Depends(_context),
                          store: Store = Depends(_store)) -> dict:
    return {"deployments": await _run(store.list_deployments, ctx)}


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
                    raise _TooLarge(self.limit)
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
               jobs: Optional["Jobs"] = None) -> FastAPI:
    """The web app on ``store``; ``jobs`` (an :class:`fornace.api.jobstore.Jobs`) defaults
    to one on the same store."""
    # imported here: fornace.api.jobroutes and the dashboard build on this module's helpers
    from fornace.api.dashboard import create_dashboard
    from fornace.api.jobroutes import router as jobs_router
    from fornace.api.jobstore import Jobs

    app = FastAPI(title="Fornace API",
                  description="Environments, configuration sessions, services and "
                              "deployments (Murano 0.2 compatible), and jobs.",
                  version="0.2")
    app.state.store = store
    app.state.jobs = jobs if jobs is not None else Jobs(store)
    app.state.auth = auth
    for prefix in ("", "/v1"):
        app.include_router(router, prefix=prefix)
        app.include_router(jobs_router, prefix=prefix)
    # the web dashboard: HTML pages on the same store, jobs and authentication
    app.mount("/dashboard", create_dashboard(store, app.state.jobs, auth))

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

    app.add_middleware(BodyLimit, limit=max_body_size)
    return app
