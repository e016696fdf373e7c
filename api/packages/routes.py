"""The HTTP routes of workflow packages (a Fornace extension of the 0.2 API).

``POST /packages`` takes the archive itself as the body (zip, tar or tar.gz;
``?public=true`` for the cloud admin).  An environment's package versions
are under ``/environments/{id}/packages``: list them, plan a move
(``GET .../packages/{name}/plan?version=``), move (``PUT .../packages/{name}``
with ``{"version": ...}``, or ``{}`` for the newest) and unpin.  The cloud
admin gives a package name to another project with ``PUT
/packages/names/{name}`` and ``{"project_id": ...}``.  The work is done by
:class:`~fornace.api.packages.store.Packages`,
:class:`~fornace.api.packages.names.PackageNames` and
:class:`~fornace.api.packages.pins.Pins`; these routes only translate HTTP.
"""
from __future__ import annotations

import json
from typing import Any, Optional

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from fornace.api.errors import ERROR_RESPONSES, BadRequest
from fornace.api.ids import ID_LENGTH, could_be_id
from fornace.api.packages.names import PackageNames
from fornace.api.packages.pins import Pins
from fornace.api.packages.store import Packages
from fornace.api.routing import JsonRoute, flag, parse_json, permitted, run
from fornace.api.context import Context

router = APIRouter(route_class=JsonRoute, responses=ERROR_RESPONSES)

_ARCHIVE_BODY = {"requestBody": {"required": True, "content": {
    media: {"schema": {"type": "string", "format": "binary"}}
    for media in ("application/zip", "application/gzip", "application/x-tar",
                  "application/octet-stream")}}}


async def _packages(request: Request) -> Packages:
    return request.app.state.packages


@router.post("/packages", status_code=201, openapi_extra=_ARCHIVE_BODY)
async def upload_package(request: Request, public: Optional[str] = Query(
                             None, description="true: a package every project sees "
                                               "(the cloud admin only)"),
                         ctx: Context = Depends(permitted("package:upload")),
                         packages: Packages = Depends(_packages)) -> dict:
    data = await request.body()
    return await run(packages.upload, ctx, data, flag(public))


@router.get("/packages")
async def list_packages(ctx: Context = Depends(permitted("package:list")),
                        packages: Packages = Depends(_packages)) -> dict:
    return {"packages": await run(packages.list, ctx)}


@router.get("/packages/{package_id}")
async def show_package(package_id: str, ctx: Context = Depends(permitted("package:show")),
                       packages: Packages = Depends(_packages)) -> dict:
    return await run(packages.show, ctx, package_id)


@router.get("/packages/{package_id}/download")
async def download_package(package_id: str, ctx: Context = Depends(permitted("package:show")),
                           packages: Packages = Depends(_packages)) -> Response:
    found = await run(packages.download, ctx, package_id)
    return Response(found.data, media_type=found.content_type, headers={
        "Content-Disposition": f'attachment; filename="{found.filename}"',
        "ETag": f'"sha256:{found.digest}"'})


@router.delete("/packages/{package_id}", status_code=204)
async def delete_package(package_id: str, ctx: Context = Depends(permitted("package:delete")),
                         packages: Packages = Depends(_packages)) -> Response:
    await run(packages.delete, ctx, package_id)
    return Response(status_code=204)


# -- who owns a package name -------------------------------------------------------

async def _names(request: Request) -> PackageNames:
    return request.app.state.package_names


async def _project(request: Request) -> Optional[str]:
    """The body of a transfer: ``{"project_id": "..."}`` (null: the cloud admin's)."""
    try:
        value: Any = parse_json(await request.body())
    except json.JSONDecodeError as exc:
        raise BadRequest(f"malformed JSON body: {exc.msg}") from None
    if not isinstance(value, dict) or set(value) != {"project_id"}:
        raise BadRequest('the body must be {"project_id": "..."} (null: the cloud admin\'s)')
    project = value["project_id"]
    if project is not None and (not isinstance(project, str) or not could_be_id(project)
                                or not project.strip()):
        raise BadRequest(f"project_id must be a project's id (a string of 1 to "
                         f"{ID_LENGTH} characters) or null")
    return project


@router.put("/packages/names/{name}")
async def transfer_package_name(name: str, request: Request,
                                ctx: Context = Depends(permitted("package:transfer")),
                                names: PackageNames = Depends(_names)) -> dict:
    project = await _project(request)
    return await run(names.transfer, ctx, name, project)


# -- an environment's package versions ---------------------------------------------

async def _pins(request: Request) -> Pins:
    return request.app.state.pins


async def _version(request: Request) -> Optional[str]:
    """The body of a move: ``{"version": "1.2.0"}``, or ``{}`` / nothing for the newest."""
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        value: Any = parse_json(raw)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"malformed JSON body: {exc.msg}") from None
    if not isinstance(value, dict) or set(value) - {"version"}:
        raise BadRequest('the body must be {"version": "..."} (or {} for the newest)')
    version = value.get("version")
    if version is not None and (not isinstance(version, str) or not version):
        raise BadRequest("version must be a non-empty string")
    return version


@router.get("/environments/{env_id}/packages")
async def environment_packages(env_id: str,
                               ctx: Context = Depends(permitted("environment:packages")),
                               pins: Pins = Depends(_pins)) -> dict:
    return {"packages": await run(pins.list, ctx, env_id)}


@router.get("/environments/{env_id}/packages/{name}/plan")
async def plan_package_move(env_id: str, name: str, version: Optional[str] = Query(
                                None, description="the version to move to (default: the "
                                                  "newest the project can use)"),
                            ctx: Context = Depends(permitted("environment:packages")),
                            pins: Pins = Depends(_pins)) -> dict:
    return await run(pins.plan, ctx, env_id, name, version)


@router.put("/environments/{env_id}/packages/{name}")
async def use_package(env_id: str, name: str, request: Request,
                      ctx: Context = Depends(permitted("environment:use_package")),
                      pins: Pins = Depends(_pins)) -> dict:
    version = await _version(request)
    return await run(pins.use, ctx, env_id, name, version)


@router.delete("/environments/{env_id}/packages/{name}", status_code=204)
async def remove_package(env_id: str, name: str,
                         ctx: Context = Depends(permitted("environment:use_package")),
                         pins: Pins = Depends(_pins)) -> Response:
    await run(pins.remove, ctx, env_id, name)
    return Response(status_code=204)
