"""The HTTP routes of workflow packages (a Fornace extension of the 0.2 API).

``POST /packages`` takes the archive itself as the body (zip, tar or tar.gz;
``?public=true`` for the cloud admin); the work is done by
:class:`~fornace.api.packages.Packages`, these routes only translate HTTP.
"""
from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from fornace.api.errors import ERROR_RESPONSES
from fornace.api.packages import Packages
from fornace.api.routing import JsonRoute, flag, permitted, run
from fornace.api.store import Context

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
