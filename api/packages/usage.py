"""Which workflow package versions an environment is pinned to, read inside the
caller's transaction: what a task carries (contract 1.8), the service types
the pinned versions bring, and which environments use a version.  Queries
only, importing no other API module, so that the stores import them without
a cycle (:mod:`fornace.api.packages.pins` is the API calls that change pins)."""
from __future__ import annotations

import functools
from typing import Any, Iterable

from sqlalchemy import ColumnElement, bindparam, func, select
from sqlalchemy.orm import Session as DbSession

from fornace.common.db.models import Environment, EnvironmentPackage, Package


def task_packages(db: DbSession, environment_id: str) -> list[dict[str, str]]:
    """The environment's pinned packages as a task names them: ``{id, name,
    version, digest}``, by name."""
    return task_packages_and_pins(db, environment_id)[0]


def task_packages_and_pins(db: DbSession,
                           environment_id: str) -> tuple[list[dict[str, str]], Pins]:
    """:func:`task_packages` and :func:`pinned` in one query."""
    rows = db.execute(_packages_query(), {"env_id": environment_id}).all()
    return ([{"id": r.id, "name": r.name, "version": r.version, "digest": r.digest}
             for r in rows], _by_name((r.pin, r.digest) for r in rows))


@functools.cache
def _packages_query() -> Any:
    """:func:`task_packages_and_pins`' read, built once (:mod:`fornace.common.db.prepared`)."""
    return (select(Package.id, Package.name, Package.version, Package.digest,
                   EnvironmentPackage.name.label("pin"))
            .join(EnvironmentPackage, EnvironmentPackage.package_id == Package.id)
            .where(EnvironmentPackage.environment_id == bindparam("env_id"))
            .order_by(EnvironmentPackage.name))


def environments_using(db: DbSession, package_id: str) -> list[dict[str, str]]:
    """The environments pinned to a package version (``{id, name, tenant_id}``,
    by name)."""
    rows = db.execute(
        select(Environment.id, Environment.name, Environment.tenant_id)
        .join(EnvironmentPackage, EnvironmentPackage.environment_id == Environment.id)
        .where(EnvironmentPackage.package_id == package_id)
        .order_by(Environment.name)).all()
    return [{"id": r.id, "name": r.name, "tenant_id": r.tenant_id} for r in rows]


# A pin in the text of :func:`pins_of`: its name, then the digest of the version;
# pins are joined by _PINS.  Names hold no control characters (the rule of
# every name, fornace.common.names), so neither separator can be in one.
_NAME_DIGEST, _PINS = "\x1f", "\x1e"

Pins = tuple[str, ...]   # the digests of an environment's pinned versions, by name


def pins_of(environment_id: Any) -> ColumnElement[str | None]:
    """The pins of the environment ``environment_id`` (a value or a column, such
    as ``Environment.id`` in a query of environments) as one text column (NULL:
    none): a scalar subquery, so that the query that reads the environment reads
    them too, in the same round trip.  :func:`pinned_digests` reads it."""
    return (select(func.aggregate_strings(EnvironmentPackage.name + _NAME_DIGEST
                                          + Package.digest, _PINS))
            .join_from(EnvironmentPackage, Package,
                       EnvironmentPackage.package_id == Package.id)
            .where(EnvironmentPackage.environment_id == environment_id)
            .scalar_subquery())


def pinned_digests(pins: str | None) -> Pins:
    """The digests in a :func:`pins_of` text, in the order of the pins' names.

    The order is the names' code points, in Python (neither SQLite's
    ``group_concat`` nor a subquery's ORDER BY promises an aggregate's order)."""
    if not pins:
        return ()
    return _by_name(tuple(pin.split(_NAME_DIGEST, 1)) for pin in pins.split(_PINS))


def _by_name(pins: Iterable[tuple[str, str]]) -> Pins:
    """The digests of ``(name, digest)`` pins, in the order of the names' code points."""
    return tuple(digest for _name, digest in sorted(pins))


def pinned(db: Any, environment_id: str) -> Pins:
    """The digests of the versions environment ``environment_id`` is pinned to."""
    return pinned_digests(db.execute(select(pins_of(environment_id))).scalar())


def package_types(db: Any, digests: Pins) -> list[tuple[str, dict[str, Any]]]:
    """``(package id, types)`` of the versions of ``digests`` that bring service
    types (their ``types.json``), in the order of ``digests``: the API's catalog
    of an environment pinned to them joins them.  A digest names the content, so
    any version of that digest brings the same types."""
    rows = db.execute(select(Package.digest, Package.id, Package.types)
                      .where(Package.digest.in_(set(digests)),
                             Package.types.is_not(None))).all()
    found = {r.digest: (r.id, r.types) for r in rows if r.types}
    return [found[digest] for digest in digests if digest in found]
