"""``GET /environments/{env_id}/model`` (and ``/model/{path}``, a part of it):
the object model a deployment is given.

A deployment sends the conductor its session's description (what
``POST .../configure`` copied from the environment's, with the session's
edits); between jobs the environment's description is the model the
conductor last returned.  This route serves that model -- the environment's,
a configuration session's (``X-Configuration-Session``), or the one a past
job was given (``?job=JOB``) -- so that ``fornace workflow simulate
--environment`` can run edited workflows on it.  Secrets are masked as every
API response masks them: fields named like passwords or declared secret by
the catalog, and their values wherever else they appear.

``PATCH /environments/{env_id}/model/`` edits a configuration session's
model with a JSON patch, as later Murano clients' ``environment model edit``
sends it (:mod:`fornace.api.modelpatch`), and answers the model it left.

``GET /environments/{env_id}/why?rule=RULE[&unit=UNIT]`` (``fornace why``)
says whether a workflow rule matches the model's units and why not
(:mod:`fornace.api.packages.why`); it quotes the model, so it needs the same rule.
"""
from __future__ import annotations

from typing import Any, Optional

import json

from fastapi import APIRouter, Body, Depends, Query, Request

from fornace.api import tree
from fornace.api.errors import ERROR_RESPONSES, BadRequest, NotFound
from fornace.api.modelpatch import CONTENT_TYPE
from fornace.api.packages.why import explain_rule
from fornace.api.routing import (SESSION_HEADER, JsonRoute, parse_json, permitted, run,
                                 store_of)
from fornace.api.context import Context
from fornace.api.stores.store import Store
from fornace.api.ids import lookup_id
from fornace.common.db.models import Job
from fornace.common.errors import shortened
from fornace.common.secrets import find_secrets, masked

router = APIRouter(route_class=JsonRoute, responses=ERROR_RESPONSES)


@router.get("/environments/{env_id}/model")
async def show_model(env_id: str, session_id: Optional[str] = SESSION_HEADER,
                     job: Optional[str] = Query(
                         None, description="a job id: the model that job was given"),
                     ctx: Context = Depends(permitted("environment:model")),
                     store: Store = Depends(store_of)) -> dict:
    """The environment's object model as the next deployment would be given it
    (a session's with the header; a past job's with ``?job=``), secrets masked."""
    return await run(environment_model, store, ctx, env_id, session_id, job)


@router.get("/environments/{env_id}/model/{path:path}")
async def show_model_part(env_id: str, path: str, session_id: Optional[str] = SESSION_HEADER,
                          job: Optional[str] = Query(
                              None, description="a job id: the model that job was given"),
                          ctx: Context = Depends(permitted("environment:model")),
                          store: Store = Depends(store_of)) -> Any:
    """The value at ``path`` of the model :func:`show_model` serves (``/services``,
    ``/services/<id>/units/0``; ``/`` is all of it), as python-muranoclient's
    ``environment model show --path`` asks for it (``GET .../model//services``)."""
    return await run(model_part, store, ctx, env_id, path, session_id, job)


_PATCH_EXAMPLE = [{"op": "replace", "path": "/services/0/name", "value": "site"}]


@router.patch("/environments/{env_id}/model")
@router.patch("/environments/{env_id}/model/", include_in_schema=False)
async def edit_model(env_id: str,
                     patch: Any = Body(..., media_type=CONTENT_TYPE,
                                       examples=[_PATCH_EXAMPLE],
                                       description="a JSON patch (RFC 6902): add, replace "
                                                   "and remove below /services and "
                                                   "/defaultNetworks"),
                     session_id: Optional[str] = SESSION_HEADER,
                     ctx: Context = Depends(permitted("environment:model_edit")),
                     store: Store = Depends(store_of)) -> dict:
    """Apply a JSON patch to a configuration session's object model (Murano's
    ``PATCH .../model/``, content type ``application/env-model-json-patch`` or
    JSON); the model it left, secrets masked."""
    if isinstance(patch, bytes):    # not a JSON content type: FastAPI left it unread
        try:
            patch = parse_json(patch)
        except json.JSONDecodeError as exc:
            raise BadRequest(f"malformed JSON body: {exc.msg}") from None
    await run(store.services.patch_model, ctx, env_id, patch, session_id)
    return await run(environment_model, store, ctx, env_id, session_id)


@router.get("/environments/{env_id}/why")
async def why(env_id: str, request: Request,
              rule: str = Query(..., description="a rule: its desc, its id or its "
                                                 "file:line (as traces name it)"),
              unit: Optional[str] = Query(None, description="a unit's id, hostname or name "
                                                            "(default: every object)"),
              ctx: Context = Depends(permitted("environment:model")),
              store: Store = Depends(store_of)) -> dict:
    """Whether the rule matches each object of the environment's model its match
    reaches (or those of the unit), and why (:mod:`fornace.api.packages.why`)."""
    return await run(explain_rule, store, request.app.state.workflow_files, ctx, env_id,
                     rule, unit)


def model_part(store: Store, ctx: Context, env_id: str, path: str,
               session_id: str | None = None, job_id: str | None = None) -> Any:
    """The value at ``path`` of :func:`environment_model`: a key of an object, in
    a list the item of that id or else at that index; 404 naming the path."""
    model = environment_model(store, ctx, env_id, session_id, job_id)
    try:
        return tree.get(model, tree.split(path))
    except NotFound:
        raise NotFound(f"{shortened(repr(path), 200)} not found in the model of environment "
                       f"{env_id}") from None


def environment_model(store: Store, ctx: Context, env_id: str, session_id: str | None = None,
                      job_id: str | None = None) -> dict[str, Any]:
    """The model (see :func:`show_model`); 404 for an unknown job of the environment."""
    with store.sessions() as db:
        env = store.environment(db, ctx, env_id)
        keys = store.secret_keys(db, env.id)
        secrets = find_secrets(env.description, keys=keys)
        if job_id:
            job = db.get(Job, lookup_id(job_id, "job"))
            if job is None or job.environment_id != env.id:
                raise NotFound(f"job {job_id} not found in environment {env_id}")
            model = job.description     # stored masked; masked again below
        elif session_id:
            model = store.config_session(db, ctx, env, session_id, editable=False).description
        else:
            model = env.description
        find_secrets(model, secrets, keys)
        return masked(model, secrets, keys=keys)
