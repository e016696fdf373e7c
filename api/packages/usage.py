"""Which workflow package versions an environment is pinned to, read inside the
caller's transaction: what a task carries (contract 1.8), the service types
the pinned versions bring, and which environments use a version.  Queries
only, importing no other API module, so that the stores import them without
a cycle (:mod:`fornace.api.packages.pins` is the API calls that change pins)."""
from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session as DbSession

from fornace.common.db.models import Environment, EnvironmentPackage, Package


def task_packages(db: DbSession, environment_id: str) -> list[dict[str, str]]:
    """The environment's pinned packages as a task names them: ``{id, name,
    version, digest}``, by name."""
    rows = db.execute(
        select(Package.id, Package.name, Package.version, Package.digest)
        .join(EnvironmentPackage, EnvironmentPackage.package_id == Package.id)
        .where(EnvironmentPackage.environment_id == environment_id)
        .order_by(EnvironmentPackage.name)).all()
    return [{"id": r.id, "name": r.name, "version": r.version, "digest": r.digest}
            for r in rows]


def environments_using(db: DbSession, package_id: str) -> list[dict[str, str]]:
    """The environments pinned to a package version (``{id, name, tenant_id}``,
    by name)."""
    rows = db.execute(
        select(Environment.id, Environment.name, Environment.tenant_id)
        .join(EnvironmentPackage, EnvironmentPackage.environment_id == Environment.id)
        .where(EnvironmentPackage.package_id == package_id)
        .order_by(Environment.name)).all()
    return [{"id": r.id, "name": r.name, "tenant_id": r.tenant_id} for r in rows]


def package_types(db: Any, environment_id: str) -> list[tuple[str, dict[str, Any]]]:
    """``(package id, types)`` of the environment's pinned packages that bring
    service types (their ``types.json``), by name: the API's catalog of the
    environment joins them."""
    rows = db.execute(
        select(Package.id, Package.types)
        .join(EnvironmentPackage, EnvironmentPackage.package_id == Package.id)
        .where(EnvironmentPackage.environment_id == environment_id,
               Package.types.is_not(None))
        .order_by(EnvironmentPackage.name)).all()
    return [(r.id, r.types) for r in rows if r.types]
