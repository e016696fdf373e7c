"""The HTTP routes of jobs (a Fornace extension of the 0.2 API).

``POST /environments/{id}/actions/{name}`` starts a lifecycle action; the
jobs of an environment, their tasks (JSON or TSV), its topology and status
can be read, its endpoints (outputs) too, and a stuck job abandoned.  The work is done by
:class:`~fornace.api.stores.jobs.Jobs`; these routes only translate HTTP.
"""
from __future__ import annotations

import json
from typing import Any, Optional

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from fornace.api.errors import ERROR_RESPONSES, BadRequest
from fornace.api.stores.jobs import Jobs
from fornace.api.routing import SESSION_HEADER, JsonRoute, flag, parse_json, permitted, run
from fornace.api.context import Context

TSV_TYPE = "text/tab-separated-values; charset=utf-8"

router = APIRouter(route_class=JsonRoute, responses=ERROR_RESPONSES)


async def _jobs(request: Request) -> Jobs:
    return request.app.state.jobs


async def _parameters(request: Request) -> dict[str, Any]:
    """The body: a JSON object of parameters; no body at all means none."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        value = parse_json(raw)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"malformed JSON body: {exc.msg}") from None
    if not isinstance(value, dict):
        raise BadRequest("the body must be a JSON object of the action's parameters")
    return value


@router.post("/environments/{env_id}/actions/{name}", status_code=202)
async def run_action(env_id: str, name: str, request: Request,
                     session_id: Optional[str] = SESSION_HEADER,
                     ctx: Context = Depends(permitted("job:run_action")),
                     jobs: Jobs = Depends(_jobs)) -> dict:
    parameters = await _parameters(request)
    return await run(jobs.run_action, ctx, env_id, name, parameters, session_id)


@router.get("/environments/{env_id}/jobs")
async def list_jobs(env_id: str, ctx: Context = Depends(permitted("job:list")),
                    jobs: Jobs = Depends(_jobs)) -> dict:
    return {"jobs": await run(jobs.list_jobs, ctx, env_id)}


@router.get("/environments/{env_id}/jobs/{job_id}")
async def show_job(env_id: str, job_id: str, ctx: Context = Depends(permitted("job:show")),
                   jobs: Jobs = Depends(_jobs)) -> dict:
    return await run(jobs.get_job, ctx, env_id, job_id)


@router.get("/environments/{env_id}/jobs/{job_id}/trace")
async def job_trace(env_id: str, job_id: str, ctx: Context = Depends(permitted("job:trace")),
                    jobs: Jobs = Depends(_jobs)) -> dict:
    """Which rule fired on which object during the job, round by round (404: no trace)."""
    return await run(jobs.trace, ctx, env_id, job_id)


TSV_RESPONSE = {200: {"description": "the tasks, one tab-separated line each",
                      "content": {TSV_TYPE.split(";")[0]: {"schema": {"type": "string"}}}}}


@router.get("/environments/{env_id}/jobs/{job_id}/tasks.tsv", response_class=Response,
            responses=TSV_RESPONSE)
async def job_tasks_tsv(env_id: str, job_id: str, ctx: Context = Depends(permitted("job:tasks")),
                        jobs: Jobs = Depends(_jobs)) -> Response:
    return Response(await run(jobs.tasks_tsv, ctx, env_id, job_id), media_type=TSV_TYPE)


@router.get("/environments/{env_id}/tasks.tsv", response_class=Response,
            responses=TSV_RESPONSE)
async def environment_tasks_tsv(env_id: str, ctx: Context = Depends(permitted("job:tasks")),
                                jobs: Jobs = Depends(_jobs)) -> Response:
    return Response(await run(jobs.tasks_tsv, ctx, env_id), media_type=TSV_TYPE)


@router.get("/environments/{env_id}/topology")
async def show_topology(env_id: str, session_id: Optional[str] = SESSION_HEADER,
                        ctx: Context = Depends(permitted("environment:topology")),
                        jobs: Jobs = Depends(_jobs)) -> dict:
    return await run(jobs.topology, ctx, env_id, session_id)


@router.get("/environments/{env_id}/status")
async def show_status(env_id: str, session_id: Optional[str] = SESSION_HEADER,
                      details: Optional[str] = Query(
                          None, description="true: each status whole, with the "
                                            "conductor's bookkeeping (lastChange, created, "
                                            "resources, configs)"),
                      ctx: Context = Depends(permitted("environment:status")),
                      jobs: Jobs = Depends(_jobs)) -> dict:
    return await run(jobs.status, ctx, env_id, session_id, flag(details))


@router.get("/environments/{env_id}/outputs")
async def show_outputs(env_id: str, ctx: Context = Depends(permitted("environment:outputs")),
                       jobs: Jobs = Depends(_jobs)) -> dict:
    return await run(jobs.outputs, ctx, env_id)


@router.post("/environments/{env_id}/abandon")
async def abandon(env_id: str, ctx: Context = Depends(permitted("job:abandon")),
                  jobs: Jobs = Depends(_jobs)) -> dict:
    return await run(jobs.abandon, ctx, env_id)
