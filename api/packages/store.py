"""Workflow packages: checked on upload, stored with their version, served back.

An upload is unpacked into a temporary folder (:mod:`fornace.common.packages.archive`:
unsafe or oversized archives are refused there) and checked as ``fornace
workflow check`` checks workflow files (the check is given by the command
that starts the API: the API does not import the conductor); only a package
without problems is stored, as the bytes that came, with their sha256.

A name belongs to the project that first uploaded it: only that project
adds versions, any other is refused with one 409 that tells nothing of the
name's versions (:mod:`fornace.api.packages.names`).  A name and version,
once stored, never change: uploading them again is a 409.  A package belongs
to the project that uploaded it, or is public (``tenant_id`` None, uploaded by the cloud admin with
``?public=true``): everyone sees the public ones and their own project's;
only its project's members or the cloud admin delete one, and never while
an environment uses it (:func:`users_of`).
"""
from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session as DbSession, defer, sessionmaker

from fornace.api.errors import BadRequest, Conflict, Forbidden, NotFound, Unavailable
from fornace.api.packages.names import claim
from fornace.api.packages.usage import environments_using
from fornace.api.context import Context
from fornace.api.views import iso
from fornace.api.ids import lookup_id
from fornace.common.db.models import Package
from fornace.common.jsonlimits import loads
from fornace.common.packages.archive import (SUFFIXES, PackageError, PackageLimits,
                                             content_type, read_manifest, unpack)
from fornace.common.packages.checks import PackageCheck


@dataclass(frozen=True)
class Download:
    """A package's archive as it was uploaded, and how to name it."""

    data: bytes
    content_type: str
    filename: str
    digest: str


def package_view(package: Package) -> dict[str, Any]:
    return {"id": package.id, "name": package.name, "version": package.version,
            "description": package.description, "public": package.public,
            "tenant_id": package.tenant_id, "digest": package.digest,
            "size": package.size, "content_type": package.content_type,
            "uploaded_by": package.uploaded_by, "created": iso(package.created)}


def users_of(db: DbSession, package: Package) -> list[dict[str, str]]:
    """The environments pinned to ``package`` (``{"id", "name"}`` each): a package
    is deleted only when this is empty (read in the deletion's transaction)."""
    return environments_using(db, package.id)


def package_types(folder: Path) -> dict[str, Any] | None:
    """The ``types`` of an unpacked (and checked) package's ``types.json``."""
    path = folder / "types.json"
    if not path.is_file():
        return None
    document = loads(path.read_text(encoding="utf-8"), source="types.json")
    return document.get("types") or None


class Packages:
    """The packages of the API's database."""

    def __init__(self, sessions: sessionmaker, limits: PackageLimits = PackageLimits(),
                 check: PackageCheck | None = None) -> None:
        self._sessions = sessions
        self.limits = limits
        self._check = check

    def upload(self, ctx: Context, data: bytes, public: bool = False) -> dict[str, Any]:
        """Check and store an archive; its view.  400 listing every problem, 403 for a
        public one of anyone but the cloud admin, 409 when the name is another
        project's or the version exists."""
        if public and not ctx.is_admin:
            raise Forbidden("only the cloud admin uploads public packages")
        if self._check is None:
            raise Unavailable("this API was started without the workflow checker: "
                              "it cannot accept packages")
        problems: list[str] = []
        try:
            kind = content_type(data)
            with tempfile.TemporaryDirectory(prefix="fornace-package-") as folder:
                files = unpack(data, Path(folder), self.limits)
                try:
                    manifest = read_manifest(Path(folder))
                except PackageError as exc:   # reported with the workflows' problems
                    problems = exc.problems
                problems += self._check(Path(folder))
                types = None if problems else package_types(Path(folder))
        except PackageError as exc:
            problems = exc.problems
        if problems:
            raise BadRequest(f"the package is refused: {'; '.join(problems)}",
                             problems=problems)
        fields = dict(name=manifest.name, version=manifest.version,
                      description=manifest.description,
                      tenant_id=None if public else ctx.tenant_id, public=public,
                      content_type=kind, digest=hashlib.sha256(data).hexdigest(),
                      size=len(data), files=files, data=data, uploaded_by=ctx.user_id,
                      types=types)
        try:
            return self._store(ctx, fields, public)
        except IntegrityError:
            # the name or the version was stored meanwhile: once more, to be told
            # whose the name is now (or that the version exists)
            pass
        try:
            return self._store(ctx, fields, public)
        except IntegrityError:
            raise self._exists(manifest.name, manifest.version) from None

    def list(self, ctx: Context) -> list[dict[str, Any]]:
        """The public packages and the caller's project's, by name then upload time."""
        with self._sessions() as db:
            rows = db.scalars(select(Package).options(defer(Package.data)).where(
                or_(Package.public.is_(True), Package.tenant_id == ctx.tenant_id))
                .order_by(Package.name, Package.created, Package.version)).all()
            return [package_view(p) for p in rows]

    def show(self, ctx: Context, package_id: str) -> dict[str, Any]:
        """A package's view with its manifest, its files and the environments pinned
        to it: ``used_by`` the caller's project's (``{id, name}``; every one for
        the cloud admin), ``used_elsewhere`` how many of other projects."""
        with self._sessions() as db:
            package = self._visible(db, ctx, package_id)
            users = users_of(db, package)
            mine = [{"id": u["id"], "name": u["name"]} for u in users
                    if ctx.is_admin or u.get("tenant_id") == ctx.tenant_id]
            return {**package_view(package), "files": list(package.files),
                    "used_by": mine, "used_elsewhere": len(users) - len(mine),
                    "manifest": {"name": package.name, "version": package.version,
                                 "description": package.description}}

    def download(self, ctx: Context, package_id: str) -> Download:
        with self._sessions() as db:
            package = self._visible(db, ctx, package_id, with_data=True)
            suffix = SUFFIXES.get(package.content_type, "")
            return Download(package.data, package.content_type,
                            f"{package.name}-{package.version}{suffix}", package.digest)

    def delete(self, ctx: Context, package_id: str) -> None:
        """Delete a package of the caller's project (a public one: the cloud admin
        only); 409 naming the environments that use it."""
        with self._sessions.begin() as db:
            package = self._visible(db, ctx, package_id, lock=True)
            if not ctx.is_admin and package.tenant_id != ctx.tenant_id:
                raise Forbidden(f"package {package.name} {package.version} is public: "
                                f"only the cloud admin deletes it")
            users = users_of(db, package)
            if users:
                names = ", ".join(u["name"] if ctx.is_admin or u.get("tenant_id") == ctx.tenant_id
                                  else "(another project's)" for u in users)
                raise Conflict(f"package {package.name} {package.version} is used by "
                               f"environments {names}: it is deleted when unused",
                               environments=[{"id": u["id"], "name": u["name"]}
                                             for u in users if ctx.is_admin
                                             or u.get("tenant_id") == ctx.tenant_id])
            db.delete(package)

    # -- helpers -----------------------------------------------------------------

    def _store(self, ctx: Context, fields: dict[str, Any], public: bool) -> dict[str, Any]:
        """Store a checked package whose name the caller may use; its view."""
        with self._sessions.begin() as db:
            claim(db, ctx, fields["name"], public)
            self._refuse_existing(db, fields["name"], fields["version"])
            package = Package(**fields)
            db.add(package)
            db.flush()
            return package_view(package)

    def _visible(self, db: DbSession, ctx: Context, package_id: str,
                 with_data: bool = False, lock: bool = False) -> Package:
        """The package if the caller may see it (public, their project's, or any for
        the cloud admin); else 404, as for one that does not exist."""
        query = select(Package).where(Package.id == lookup_id(package_id, "package"))
        if not with_data:
            query = query.options(defer(Package.data))
        if lock:
            query = query.with_for_update()
        package = db.scalars(query).first()
        if package is None or not (package.public or ctx.is_admin
                                   or package.tenant_id == ctx.tenant_id):
            raise NotFound(f"package {package_id} not found")
        return package

    def _refuse_existing(self, db: DbSession, name: str, version: str) -> None:
        if db.scalar(select(Package.id).where(Package.name == name,
                                              Package.version == version)) is not None:
            raise self._exists(name, version)

    @staticmethod
    def _exists(name: str, version: str) -> Conflict:
        return Conflict(f"version {version} of package {name} exists already: versions "
                        f"are immutable, upload it with another version")
