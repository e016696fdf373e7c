"""What the API's route modules share: the request context, the strict JSON
body parser and route class, the configuration-session header and the
environment body.  The JSON API (``app``), the job routes (``jobroutes``) and
the dashboard import it; it imports none of them.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import json
import math
import re
from typing import Any, Awaitable, Callable, Optional

from fastapi import Depends, Header, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.concurrency import run_in_threadpool

from fornace.api.auth import NoAuth
from fornace.api.context import Context
from fornace.api.stores.store import Store
from fornace.common import names, requestcontext
from fornace.common.db.replay import replayed

SESSION_HEADER = Header(None, alias="X-Configuration-Session",
                        description="ID of a configuration session of this environment")


class EnvironmentIn(BaseModel):
    """Create or rename an environment."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=names.NAME_MAX)

    @field_validator("name")
    @classmethod
    def _a_name(cls, name: str) -> str:
        problem = names.name_problem(name)   # the rule of every name (fornace.common.names)
        if problem is not None:
            raise ValueError(problem)
        return name


class EnvironmentCreate(EnvironmentIn):
    """Create an environment: a name, and the OpenStack region it is deployed
    to (Murano's ``region``, sent by python-muranoclient 2.8; null or absent:
    the conductor's ``[heat] region_name``), and the networks it joins
    (Murano's ``defaultNetworks``, checked by :mod:`fornace.api.networks`)."""

    region: Optional[str] = Field(None, max_length=names.NAME_MAX)
    defaultNetworks: Optional[dict[str, Any]] = Field(
        None, description="the networks the environment's instances join, as later Murano "
                          "clients send them (--join-net-id, --join-subnet-id): "
                          "{\"environment\": {network}, \"flat\": null}; kept in the "
                          "object model (fornace.api.networks)")

    @field_validator("region")
    @classmethod
    def _a_region(cls, region: Optional[str]) -> Optional[str]:
        if region is None:
            return None
        problem = names.name_problem(region)   # a Keystone region id: a name's rule
        if problem is not None:
            raise ValueError(problem)
        return region.strip()


# The routes are ``async``: FastAPI then resolves the dependencies and
# validates and serialises the response on the event loop, and only the Store
# call (blocking database I/O) goes to the thread pool -- one hop per request
# instead of one per dependency, one for the endpoint and one for the response.

async def context(request: Request) -> Context:
    """The caller, ``is_admin`` set by the policy (:mod:`fornace.api.policy`)."""
    auth = request.app.state.auth
    if type(auth) is NoAuth:  # headers only: nothing that blocks
        ctx = auth.context(request.headers)
    else:
        ctx = await run_in_threadpool(auth.context, request.headers)  # e.g. a Keystone call
    logged = requestcontext.current()
    if logged is not None:   # the request's log lines name the caller from now on
        logged.user_id, logged.project_id = ctx.user_id, ctx.tenant_id
    return request.app.state.policy.with_admin(ctx)


async def authorize(request: Request, ctx: Context, action: str,
                    env_id: str | None = None) -> None:
    """403 unless the policy allows ``ctx`` the ``action`` on environment ``env_id``
    (on the caller's own project without one).

    The target is the caller's own project, except for a cloud admin, whose
    target is the environment's project (one indexed read): anyone else can
    only reach their own project's environments -- the Store refuses the
    others (403) -- so for them the two are the same whenever the call goes
    on, and the common case costs no query.
    """
    project = None
    if env_id is not None and ctx.is_admin:
        project = await run(request.app.state.store.tenant_of, env_id)
    request.app.state.policy.authorize(ctx, action, project)


def permitted(action: str) -> Callable[..., Awaitable[Context]]:
    """A route dependency: the caller (:func:`context`) once the policy allows
    them ``action`` on the environment of the path's ``env_id``, or on their
    own project for routes without one."""
    async def permitted_caller(request: Request, ctx: Context = Depends(context)) -> Context:
        await authorize(request, ctx, action, request.path_params.get("env_id"))
        return ctx
    return permitted_caller


async def store_of(request: Request) -> Store:
    return request.app.state.store


#: the threads the store calls run in: as many as anyio's default thread pool
#: (which served them before), above the database pool's 30 connections
STORE_THREADS = 40
_store_threads = concurrent.futures.ThreadPoolExecutor(STORE_THREADS,
                                                       thread_name_prefix="api-store")


async def run(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)`` in a thread (blocking database I/O), run once more
    if it found a dead database connection before committing anything
    (:func:`fornace.common.db.replay.replayed`: the API's engine does not ping a
    connection before each use).

    The event loop's own executor hand-off (a future and a wake-up), not
    anyio's ``to_thread`` (a cancel scope, a capacity limiter and its
    checkpoints, a queue per worker): that cost the loop's thread about as much
    CPU as a list's query.  The context variables go along, as anyio passes
    them."""
    work = functools.partial(replayed, functools.partial(call, *args, **kwargs),
                             getattr(call, "__qualname__", "a request"))
    return await asyncio.get_running_loop().run_in_executor(
        _store_threads, contextvars.copy_context().run, work)


def flag(value: Optional[str]) -> bool:
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
