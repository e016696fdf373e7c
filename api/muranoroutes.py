"""The Murano 0.2 routes: environments, configuration sessions, services and
deployments with their reports (plus ``GET /types`` and an environment's
model, :mod:`fornace.api.typeroutes` and :mod:`fornace.api.modelroutes`).

Routes only translate HTTP to the store calls
(:class:`~fornace.api.stores.store.Store`); the wire shapes follow
python-muranoclient 2.8 (``{"environments": […]}``, a bare list for
services, JSON error dicts).  The job routes (a Fornace extension) are in
:mod:`fornace.api.jobroutes`.
"""
from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi.responses import Response

from fornace.api.context import Context
from fornace.api.errors import ERROR_RESPONSES, BadRequest
from fornace.api.modelroutes import router as model_router
from fornace.api.networks import networks_problem
from fornace.api.routing import (SESSION_HEADER, EnvironmentCreate, EnvironmentIn, JsonRoute,
                                 flag, permitted, run, store_of)
from fornace.api.stores.store import Store
from fornace.api.typeroutes import router as types_router


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
    return {"environments": await run(store.environments.list, ctx, tenant, every)}


@router.post("/environments")
async def create_environment(body: EnvironmentCreate,
                             ctx: Context = Depends(permitted("environment:create")),
                             store: Store = Depends(store_of)) -> dict:
    """A new empty environment; ``region``: the OpenStack region of its stack;
    ``defaultNetworks``: the networks it joins (kept in its object model)."""
    problem = networks_problem(body.defaultNetworks)
    if problem is not None:
        raise BadRequest(f"{problem[0]}: {problem[1]}", field=problem[0])
    return await run(store.environments.create, ctx, body.name.strip(), body.region,
                     body.defaultNetworks)


@router.get("/environments/{env_id}")
async def show_environment(env_id: str, session_id: Optional[str] = SESSION_HEADER,
                           ctx: Context = Depends(permitted("environment:show")),
                           store: Store = Depends(store_of)) -> dict:
    return await run(store.environments.get, ctx, env_id, session_id)


@router.put("/environments/{env_id}")
async def update_environment(env_id: str, body: EnvironmentIn,
                             ctx: Context = Depends(permitted("environment:update")),
                             store: Store = Depends(store_of)) -> dict:
    return await run(store.environments.update, ctx, env_id, body.name.strip())


@router.delete("/environments/{env_id}")
async def delete_environment(env_id: str, abandon: Optional[str] = Query(None),
                             ctx: Context = Depends(permitted("environment:delete")),
                             store: Store = Depends(store_of)) -> Response:
    await run(store.environments.delete, ctx, env_id, flag(abandon))
    return Response(status_code=200)


@router.get("/environments/{env_id}/lastStatus")
async def last_status(env_id: str, session_id: Optional[str] = SESSION_HEADER,
                      ctx: Context = Depends(permitted("environment:last_status")),
                      store: Store = Depends(store_of)) -> dict:
    return {"lastStatuses": await run(store.reports.last_status, ctx, env_id, session_id)}


@router.post("/environments/{env_id}/configure")
async def configure(env_id: str, ctx: Context = Depends(permitted("session:configure")),
                    store: Store = Depends(store_of)) -> dict:
    return await run(store.config_sessions.open, ctx, env_id)


@router.get("/environments/{env_id}/sessions/{session_id}")
async def show_session(env_id: str, session_id: str,
                       ctx: Context = Depends(permitted("session:show")),
                       store: Store = Depends(store_of)) -> dict:
    return await run(store.config_sessions.get, ctx, env_id, session_id)


@router.delete("/environments/{env_id}/sessions/{session_id}")
async def delete_session(env_id: str, session_id: str,
                         ctx: Context = Depends(permitted("session:delete")),
                         store: Store = Depends(store_of)) -> Response:
    await run(store.config_sessions.delete, ctx, env_id, session_id)
    return Response(status_code=200)


@router.post("/environments/{env_id}/sessions/{session_id}/deploy")
async def deploy(env_id: str, session_id: str,
                 change_detection: Optional[str] = Query(
                     None, description="evaluate (default), always or skip: whether "
                                       "deployed units are reconfigured when their "
                                       "configuration changed"),
                 ctx: Context = Depends(permitted("session:deploy")),
                 store: Store = Depends(store_of)) -> Response:
    await run(store.config_sessions.deploy, ctx, env_id, session_id, change_detection)
    return Response(status_code=200)


@router.get("/environments/{env_id}/services{path:path}")
async def get_services(env_id: str, path: str, session_id: Optional[str] = SESSION_HEADER,
                       ctx: Context = Depends(permitted("service:show")),
                       store: Store = Depends(store_of)) -> Any:
    return await run(store.services.get, ctx, env_id, path, session_id)


@router.post("/environments/{env_id}/services{path:path}")
async def post_services(env_id: str, path: str, data: Any = Body(...),
                        session_id: Optional[str] = SESSION_HEADER,
                        ctx: Context = Depends(permitted("service:create")),
                        store: Store = Depends(store_of)) -> Any:
    return await run(store.services.post, ctx, env_id, path, _json(data), session_id)


@router.put("/environments/{env_id}/services{path:path}")
async def put_services(env_id: str, path: str, data: Any = Body(...),
                       session_id: Optional[str] = SESSION_HEADER,
                       ctx: Context = Depends(permitted("service:update")),
                       store: Store = Depends(store_of)) -> Any:
    return await run(store.services.put, ctx, env_id, path, _json(data), session_id)


@router.delete("/environments/{env_id}/services{path:path}")
async def delete_services(env_id: str, path: str, session_id: Optional[str] = SESSION_HEADER,
                          ctx: Context = Depends(permitted("service:delete")),
                          store: Store = Depends(store_of)) -> Response:
    await run(store.services.delete, ctx, env_id, path, session_id)
    return Response(status_code=200)


@router.get("/environments/{env_id}/deployments")
async def environment_deployments(env_id: str,
                                  ctx: Context = Depends(permitted("deployment:list")),
                                  store: Store = Depends(store_of)) -> dict:
    return {"deployments": await run(store.reports.deployments, ctx, env_id)}


@router.get("/environments/{env_id}/deployments/{deployment_id}")
async def deployment_reports(env_id: str, deployment_id: str, request: Request,
                             ctx: Context = Depends(permitted("deployment:show")),
                             store: Store = Depends(store_of)) -> dict:
    service_ids = request.query_params.getlist("service_id")
    return {"reports": await run(store.reports.of_deployment, ctx, env_id, deployment_id,
                                 service_ids)}


@router.get("/deployments")
async def all_deployments(ctx: Context = Depends(permitted("deployment:list")),
                          store: Store = Depends(store_of)) -> dict:
    return {"deployments": await run(store.reports.deployments, ctx)}
