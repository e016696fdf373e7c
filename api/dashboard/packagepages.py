"""The dashboard's pages of workflow packages: the list, a package, the upload
form, the deletion's confirmation, the download.

The work is done by :class:`~fornace.api.packages.store.Packages`, as for the API's
``/packages`` routes, and each page names the same policy rule as the API call
it makes.  The upload form is ``multipart/form-data`` (a file field), read
with python-multipart (:func:`read_upload`).  A refused package comes back on the
form with each of its problems (``file:line: message``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.datastructures import UploadFile

from fornace.api.dashboard import csrf, urls
from fornace.api.dashboard.access import caller
from fornace.api.dashboard.formdata import MAX_FIELDS, Form, read_form
from fornace.api.dashboard.listing import paginate, query_text
from fornace.api.dashboard.pages import redirect, render
from fornace.api.errors import ApiError, BadRequest, NotFound, Unauthorized, Unavailable
from fornace.api.packages.store import Packages
from fornace.api.routing import flag, run
from fornace.api.context import Context

router = APIRouter()
_run = run   # a request that finds a connection dead is run once more

FILE_FIELD = "package"        # the upload form's file input
NO_FILE = "Choose a package archive (zip, tar or tar.gz) to upload."


def packages_of(request: Request) -> Packages:
    """The dashboard's workflow packages; 503 when it was started without them."""
    packages = request.app.state.packages
    if packages is None:
        raise Unavailable("workflow packages are unavailable: this dashboard was started "
                          "without them")
    return packages


def _package_path(package_id: str) -> str:
    return urls.path("packages", package_id)


def size_text(size: int) -> str:
    """A size for people: ``512 bytes``, ``3.4 KiB``, ``1.2 MiB``."""
    if size < 1024:
        return f"{size} byte{'' if size == 1 else 's'}"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1024 * 1024):.1f} MiB"


def _may_delete(request: Request, ctx: Context, package: dict[str, Any]) -> bool:
    """Whether the delete button shows: the policy's ``package:delete`` (on the
    caller's project, as the API checks it), and the package is the caller's
    project's (a public one: the cloud admin only, as Packages.delete says)."""
    return (request.app.state.policy.allows(ctx, "package:delete")
            and (ctx.is_admin or package["tenant_id"] == ctx.tenant_id))


def _row(request: Request, ctx: Context, package: dict[str, Any]) -> dict[str, Any]:
    return {**package, "size_text": size_text(package["size"]),
            "may_delete": _may_delete(request, ctx, package)}


# -- reading the upload form ---------------------------------------------------------------

@dataclass(frozen=True)
class Upload:
    """A posted ``multipart/form-data`` form: its text fields and its files' contents."""

    fields: Form
    files: dict[str, bytes]


async def read_upload(request: Request) -> Upload:
    """The posted multipart form (parsed by Starlette with python-multipart; a
    malformed one is a 400 saying why), after the cross-site request check."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "multipart/form-data":
        raise BadRequest("the upload form is sent as multipart/form-data")
    csrf.check_origin(request)   # before the body is read
    pairs: list[tuple[str, str]] = []
    files: dict[str, bytes] = {}
    async with request.form(max_files=1, max_fields=MAX_FIELDS) as form:
        for name, value in form.multi_items():
            if isinstance(value, UploadFile):
                files[name] = await value.read()
            else:
                pairs.append((name, value))
    upload = Upload(Form(pairs), files)
    csrf.check(request, upload.fields.get(csrf.FIELD) or None)
    return upload


# -- the pages -------------------------------------------------------------------------------

@router.get("/packages")
async def package_list(request: Request) -> Response:
    ctx = await caller(request, "package:list")
    packages = packages_of(request)
    every = await _run(packages.list, ctx)
    query = query_text(request.query_params.get("q"))
    kept = [p for p in every if query.casefold() in p["name"].casefold()]
    listing = paginate(kept, request.query_params.get("page"),
                       request.query_params.get("per_page"), {"q": query})
    return render(request, "packages.html", listing=listing, query=query, count=len(every),
                  rows=[_row(request, ctx, p) for p in listing.items])


def _upload_page(request: Request, ctx: Context, status: int = 200, error: str | None = None,
                 problems: list[str] | None = None, public: bool = False) -> Response:
    may_public = ctx.is_admin and request.app.state.policy.allows(ctx, "package:upload")
    return render(request, "package_upload.html", status=status, error=error,
                  problems=problems or [], public=public and may_public,
                  may_public=may_public, file_field=FILE_FIELD)


@router.get("/packages/new")
async def upload_form(request: Request) -> Response:
    ctx = await caller(request, "package:upload")
    return _upload_page(request, ctx)


@router.post("/packages/new")
async def upload_package(request: Request) -> Response:
    ctx = await caller(request, "package:upload")
    packages = packages_of(request)
    upload = await read_upload(request)
    public = flag(upload.fields.get("public"))
    data = upload.files.get(FILE_FIELD, b"")
    if not data:
        return _upload_page(request, ctx, 400, NO_FILE, public=public)
    try:
        package = await _run(packages.upload, ctx, data, public)
    except Unauthorized:
        raise
    except ApiError as exc:
        problems = [str(p) for p in exc.details.get("problems") or []]
        message = exc.message
        if problems:
            count = len(problems)
            message = (f"The package is refused: {count} problem{'s' if count > 1 else ''} "
                       f"to fix, then upload it again.")
        return _upload_page(request, ctx, exc.status, message, problems, public)
    return redirect(request, _package_path(package["id"]),
                    f"Package {package['name']} {package['version']} uploaded.")


@router.get("/packages/{package_id}")
async def package_page(package_id: str, request: Request) -> Response:
    ctx = await caller(request, "package:show")
    package = await _run(packages_of(request).show, ctx, package_id)
    return render(request, "package.html", package=_row(request, ctx, package))


@router.get("/packages/{package_id}/download")
async def download(package_id: str, request: Request) -> Response:
    ctx = await caller(request, "package:show")
    found = await _run(packages_of(request).download, ctx, package_id)
    return Response(found.data, media_type=found.content_type, headers={
        "Content-Disposition": f'attachment; filename="{found.filename}"',
        "ETag": f'"sha256:{found.digest}"'})


@router.get("/packages/{package_id}/delete")
async def confirm_delete(package_id: str, request: Request) -> Response:
    ctx = await caller(request, "package:delete")
    package = await _run(packages_of(request).show, ctx, package_id)
    return render(request, "confirm_delete_package.html", package=_row(request, ctx, package))


@router.post("/packages/{package_id}/delete")
async def delete_package(package_id: str, request: Request) -> Response:
    ctx = await caller(request, "package:delete")
    await read_form(request)
    packages = packages_of(request)

    def delete() -> str:
        package = packages.show(ctx, package_id)
        packages.delete(ctx, package_id)
        return f"{package['name']} {package['version']}"
    try:
        deleted = await _run(delete)
    except Unauthorized:
        raise
    except NotFound as exc:
        return redirect(request, "/packages", exc.message, "error")
    except ApiError as exc:       # used by environments (409), public (403)
        return redirect(request, _package_path(package_id), exc.message, "error")
    return redirect(request, "/packages", f"Package {deleted} deleted.")
