"""The dashboard's pages of an environment's workflow package versions: which
versions it runs with, pinning one, the plan of a move (files and types,
with their diffs) confirmed before it is made, and unpinning.

The work is done by :class:`~fornace.api.packages.pins.Pins`, as for the API's
``/environments/{id}/packages`` routes, under the same policy rules.
"""
from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from fornace.api.routing import run
from fornace.api.dashboard import urls
from fornace.api.dashboard.access import caller
from fornace.api.dashboard.formdata import read_form
from fornace.api.dashboard.packagepages import packages_of
from fornace.api.dashboard.pages import redirect, render
from fornace.api.errors import ApiError
from fornace.api.packages.pins import Pins

router = APIRouter()
_run = run   # a request that finds a connection dead is run once more


def _pins(request: Request) -> Pins:
    return Pins(request.app.state.store, packages_of(request))


def _path(env_id: str, name: str = "") -> str:
    return urls.path("environments", env_id, "packages", *([name] if name else []))


@router.get("/environments/{env_id}/packages")
async def environment_packages(env_id: str, request: Request) -> Response:
    ctx = await caller(request, "environment:packages", env_id=env_id)
    pins = _pins(request)

    def load() -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
        pinned = pins.list(ctx, env_id)
        names = sorted({p["name"] for p in pins.packages.list(ctx)} -
                       {p["name"] for p in pinned})
        return pins.store.environments.get(ctx, env_id), pinned, names
    env, pinned, names = await _run(load)
    return render(request, "environment_packages.html", env=env, pins=pinned,
                  names=names)


@router.get("/environments/{env_id}/packages/plan")
async def chosen_plan(env_id: str, request: Request) -> Response:
    """The "use a package" form: on to the plan of the package chosen."""
    await caller(request, "environment:packages", env_id=env_id)
    name = request.query_params.get("name") or ""
    return redirect(request, urls.path("environments", env_id, "packages", name, "plan"))


@router.get("/environments/{env_id}/packages/{name}/plan")
async def plan_page(env_id: str, name: str, request: Request) -> Response:
    ctx = await caller(request, "environment:packages", env_id=env_id)
    pins = _pins(request)
    version = request.query_params.get("version") or None
    plan = await _run(pins.plan, ctx, env_id, name, version)
    env = await _run(pins.store.environments.get, ctx, env_id)
    unchanged = (plan["from"] is not None
                 and plan["from"]["package_id"] == plan["to"]["package_id"])
    return render(request, "package_plan.html", env=env, plan=plan, unchanged=unchanged)


@router.post("/environments/{env_id}/packages/{name}")
async def use_package(env_id: str, name: str, request: Request) -> Response:
    ctx = await caller(request, "environment:use_package", env_id=env_id)
    form = await read_form(request)
    version = form.get("version") or None
    try:
        moved = await _run(_pins(request).use, ctx, env_id, name, version)
    except ApiError as exc:
        if exc.status in (401, 403):
            raise
        return redirect(request, _path(env_id), exc.message, "error")
    text = (f"The environment now uses {name} {moved['to']['version']}: its next "
            f"deployment or action runs with it." if moved["moved"] else
            f"The environment uses {name} {moved['to']['version']} already.")
    return redirect(request, _path(env_id), text)


@router.post("/environments/{env_id}/packages/{name}/unpin")
async def unpin_package(env_id: str, name: str, request: Request) -> Response:
    ctx = await caller(request, "environment:use_package", env_id=env_id)
    await read_form(request)
    try:
        await _run(_pins(request).remove, ctx, env_id, name)
    except ApiError as exc:
        if exc.status in (401, 403):
            raise
        return redirect(request, _path(env_id), exc.message, "error")
    return redirect(request, _path(env_id),
                    f"Package {name} unpinned: the next jobs run without it.")
