"""Who owns a workflow package name: only that project uploads versions of it.

A name belongs to the project that first uploaded a version of it (a row of
``package_names``; ``tenant_id`` None: the cloud admin's, a name first
uploaded public).  It stays that project's when its versions are deleted, so
that no other project takes a name environments knew; the cloud admin moves
it to another project (:meth:`PackageNames.transfer`).

Another project's upload of a name is refused with one answer whatever the
name holds -- public versions, private ones, none left: ``409 package name
'x' is not available to this project``.  That a name is taken cannot be
hidden (names are one namespace); which versions it has, whether any is
private, and whose it is, are not told.  The cloud admin, who sees every
package, is told whose it is.

Two projects uploading the same new name at once: both insert its row, the
primary key lets one commit and the other's insert fails
(:class:`~sqlalchemy.exc.IntegrityError`); that upload is tried once more
and then finds the name taken (:meth:`Packages.upload
<fornace.api.packages.store.Packages.upload>`).
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session as DbSession, sessionmaker

from fornace.api.context import Context
from fornace.api.errors import Conflict, NotFound
from fornace.api.views import iso
from fornace.common.db.models import PackageName, utcnow
from fornace.common.packages.archive import NAME


def not_available(name: str) -> Conflict:
    """The one answer to a project uploading a name it does not own."""
    return Conflict(f"package name {name!r} is not available to this project")


def may_upload(ctx: Context, owner: PackageName) -> bool:
    """Whether ``ctx``'s project may add versions of ``owner``'s name: it owns the
    name, or the name is the cloud admin's and they are the caller."""
    if owner.tenant_id is None:
        return ctx.is_admin
    return owner.tenant_id == ctx.tenant_id


def claim(db: DbSession, ctx: Context, name: str, public: bool) -> None:
    """In an upload's transaction: make ``name`` the caller's if nobody has it
    (the cloud admin's when ``public``), or refuse it (409) when it is another
    project's.  The row read is share-locked so that a transfer waits for the
    upload (and the other way round); a new row is flushed at once, so that a
    concurrent claim of the same name fails here (IntegrityError)."""
    owner = db.scalars(select(PackageName).where(PackageName.name == name)
                       .with_for_update(read=True)).first()
    if owner is None:
        now = utcnow()
        db.add(PackageName(name=name, tenant_id=None if public else ctx.tenant_id,
                           created=now, updated=now))
        db.flush()
        return
    if may_upload(ctx, owner):
        return
    if ctx.is_admin:       # sees every package: may be told whose it is
        whose = "the cloud admin" if owner.tenant_id is None else f"project {owner.tenant_id}"
        raise Conflict(f"package name {name!r} belongs to {whose}: transfer it first "
                       f"(PUT /v1/packages/names/{name})", owner=owner.tenant_id)
    raise not_available(name)


def name_view(owner: PackageName) -> dict[str, Any]:
    return {"name": owner.name, "project_id": owner.tenant_id,
            "created": iso(owner.created), "updated": iso(owner.updated)}


class PackageNames:
    """The owners of package names (the API's database)."""

    def __init__(self, sessions: sessionmaker) -> None:
        self._sessions = sessions

    def transfer(self, ctx: Context, name: str, project_id: str | None) -> dict[str, Any]:
        """Give ``name`` to project ``project_id`` (None: the cloud admin): from now
        on only it uploads versions of the name.  The versions uploaded already
        stay with the projects that uploaded them (their environments keep
        them), and their version numbers stay taken (a name's versions are
        unique: the new owner uploading one is told it exists).  The route lets only the cloud admin call this (``package:transfer``).
        The name's view, with ``previous_project_id``; 404 for a name nobody has."""
        if not NAME.fullmatch(name):
            raise NotFound(f"no package name {name!r:.80}")
        with self._sessions.begin() as db:
            owner = db.scalars(select(PackageName).where(PackageName.name == name)
                               .with_for_update()).first()
            if owner is None:
                raise NotFound(f"no package name {name!r}: none was uploaded")
            previous = owner.tenant_id
            if previous != project_id:
                owner.tenant_id, owner.updated = project_id, utcnow()
                db.flush()
            return {**name_view(owner), "previous_project_id": previous}
