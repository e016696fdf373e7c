"""Pinning environments to workflow package versions, and moving them.

An environment names at most one version of each package
(``environment_packages``).  Every job it runs -- the deployment, and every
lifecycle action -- carries those versions in its task (contract 1.8), so
what it runs changes only when a user moves it: :meth:`Pins.plan` shows what
a move would change (files and service types, with diffs) without changing
anything, :meth:`Pins.use` moves it and answers the same plan.  A version
not given is the newest one the environment's project sees (the latest
uploaded, public or the project's own).  A move while a job runs applies
from the next job on.
"""
from __future__ import annotations

import datetime
from typing import Any

from packaging.version import InvalidVersion, Version

from sqlalchemy import delete, or_, select
from sqlalchemy.orm import Session as DbSession

from fornace.api.errors import NotFound
from fornace.api.packages.plan import package_changes
from fornace.api.packages.store import Packages
from fornace.api.context import Context
from fornace.api.stores.store import Store
from fornace.api.views import iso
from fornace.common.db.models import Environment, EnvironmentPackage, Package, utcnow
from fornace.common.packages.archive import NAME


def pin_view(pin: EnvironmentPackage, package: Package, newest: str | None) -> dict[str, Any]:
    return {"name": package.name, "version": package.version, "package_id": package.id,
            "description": package.description, "digest": package.digest,
            "newest": newest, "pinned_by": pin.pinned_by, "updated": iso(pin.updated)}


class Pins:
    """The package versions of environments (the API's database)."""

    def __init__(self, store: Store, packages: Packages) -> None:
        self.store = store
        self.packages = packages
        self._sessions = store.sessions

    def list(self, ctx: Context, env_id: str) -> list[dict[str, Any]]:
        """The environment's pinned packages, by name, each with the newest
        version its project could move to."""
        with self._sessions() as db:
            env = self.store.environment(db, ctx, env_id)
            rows = db.execute(select(EnvironmentPackage, Package)
                              .join(Package, Package.id == EnvironmentPackage.package_id)
                              .where(EnvironmentPackage.environment_id == env.id)
                              .order_by(EnvironmentPackage.name)).all()
            return [pin_view(pin, package, self._newest(db, env, package.name).version)
                    for pin, package in rows]

    def plan(self, ctx: Context, env_id: str, name: str,
             version: str | None = None) -> dict[str, Any]:
        """What moving the environment to ``name`` ``version`` (None: the newest)
        would change; nothing is changed."""
        with self._sessions() as db:
            env = self.store.environment(db, ctx, env_id)
            return self._plan(db, env, name, version)

    def use(self, ctx: Context, env_id: str, name: str,
            version: str | None = None) -> dict[str, Any]:
        """Pin the environment to ``name`` ``version`` (None: the newest); the plan
        of that move, with ``"moved": False`` when it was pinned to it already."""
        with self._sessions.begin() as db:
            env = self.store.environment(db, ctx, env_id, lock=True)
            plan = self._plan(db, env, name, version)
            pin = db.get(EnvironmentPackage, (env.id, name))
            target = plan["to"]["package_id"]
            if pin is not None and pin.package_id == target:
                return {**plan, "moved": False}
            if pin is None:
                db.add(EnvironmentPackage(environment_id=env.id, name=name, package_id=target,
                                          pinned_by=ctx.user_id, updated=utcnow()))
            else:
                pin.package_id, pin.pinned_by, pin.updated = target, ctx.user_id, utcnow()
            return {**plan, "moved": True}

    def remove(self, ctx: Context, env_id: str, name: str) -> None:
        """Unpin a package: the environment's next jobs run without it."""
        with self._sessions.begin() as db:
            env = self.store.environment(db, ctx, env_id, lock=True)
            gone = db.execute(delete(EnvironmentPackage).where(
                EnvironmentPackage.environment_id == env.id,
                EnvironmentPackage.name == name)).rowcount
            if not gone:
                raise NotFound(f"environment {env.name} uses no package {name!r}")

    # -- helpers -----------------------------------------------------------------

    def _plan(self, db: DbSession, env: Environment, name: str,
              version: str | None) -> dict[str, Any]:
        if not NAME.fullmatch(name):
            raise NotFound(f"no package {name!r}")
        target = (self._newest(db, env, name) if version is None
                  else self._version(db, env, name, version))
        pin = db.get(EnvironmentPackage, (env.id, name))
        current = db.get(Package, pin.package_id) if pin is not None else None
        before = current.data if current is not None else None
        changes = ({"files": {"added": [], "removed": [], "changed": [],
                              "unchanged": len(target.files)},
                    "types": {"added": [], "removed": [], "changed": []}}
                   if current is not None and current.digest == target.digest
                   else package_changes(before, target.data, self.packages.limits))
        return {"environment": {"id": env.id, "name": env.name}, "name": name,
                "from": _ref(current), "to": _ref(target), **changes}

    def _visible(self, env: Environment, name: str) -> Any:
        return select(Package).where(
            Package.name == name,
            or_(Package.public.is_(True), Package.tenant_id == env.tenant_id))

    def _newest(self, db: DbSession, env: Environment, name: str) -> Package:
        """The highest version the project can use (see :func:`version_key`)."""
        rows = db.execute(self._visible(env, name).with_only_columns(
            Package.id, Package.version, Package.created)).all()
        if not rows:
            raise NotFound(f"no package {name!r} that environment {env.name}'s project "
                           f"can use (public, or uploaded by the project)")
        newest = max(rows, key=lambda row: version_key(row.version, row.created))
        return db.get(Package, newest.id)

    def _version(self, db: DbSession, env: Environment, name: str, version: str) -> Package:
        package = db.scalars(self._visible(env, name).where(Package.version == version)).first()
        if package is None:
            known = db.execute(self._visible(env, name).with_only_columns(
                Package.version, Package.created)).all()
            ordered = [row.version for row in sorted(
                known, key=lambda row: version_key(row.version, row.created))]
            have = f" (there are: {', '.join(ordered)})" if ordered else ""
            raise NotFound(f"no version {version!r} of package {name!r} that environment "
                           f"{env.name}'s project can use{have}")
        return package


def version_key(version: str, created: datetime.datetime) -> tuple:
    """How versions order: as PEP 440 versions (1.10.0 after 1.9.0, 2.0.0rc1 before
    2.0.0) where they read as such; those that do not, before them, by upload
    time.  A hotfix 1.0.2 uploaded after 1.1.0 is not the newest."""
    try:
        return (1, Version(version), created)
    except InvalidVersion:
        return (0, created)


def _ref(package: Package | None) -> dict[str, str] | None:
    if package is None:
        return None
    return {"package_id": package.id, "version": package.version, "digest": package.digest}
