"""Environment names unique within a tenant, even under concurrent creates.

A check then a write could both pass in two connections; :func:`lock_names`
makes the tenant's names stay as read until the transaction ends, so two
creates (or renames) of one name take turns and the second sees the first.
"""
from __future__ import annotations

from sqlalchemy import select, text
from sqlalchemy.orm import Session as DbSession

from fornace.api.errors import Conflict
from fornace.common.db.models import Environment

# PostgreSQL advisory lock space of environment names ("fnam"); the key in it is
# the tenant's hash (two tenants sharing a hash only take turns)
_NAMES_LOCK = 0x666E616D


def lock_names(db: DbSession, tenant_id: str) -> None:
    """Make the tenant's environment names stay as read until the transaction ends:
    two creates (or renames) of one name take turns, so the second sees the first."""
    dialect = db.get_bind().dialect.name
    if dialect == "postgresql":
        db.execute(text("SELECT pg_advisory_xact_lock(CAST(:space AS integer), "
                        "hashtext(:tenant))"), {"space": _NAMES_LOCK, "tenant": tenant_id})
    else:
        sqlite_write_lock(db)


def sqlite_write_lock(db: DbSession) -> None:
    """On SQLite, take the database's write lock now (a write that changes nothing).

    The driver begins a transaction only at the first write, so the reads before
    it see other writers' commits as they come: a check then a write could both
    pass in two connections.  After this, the other writers wait until this
    transaction ends.  Other databases: nothing (they lock rows)."""
    if db.get_bind().dialect.name == "sqlite":
        db.execute(text("UPDATE environments SET name = name WHERE 1 = 0"))


def refuse_taken_name(db: DbSession, tenant_id: str, name: str, but: str | None = None) -> None:
    """A 409 naming the tenant's environment (other than ``but``) named ``name``."""
    query = select(Environment.id).where(Environment.tenant_id == tenant_id,
                                         Environment.name == name)
    if but is not None:
        query = query.where(Environment.id != but)
    existing = db.scalars(query.order_by(Environment.created).limit(1)).first()
    if existing is not None:
        raise Conflict(f"an environment named {name!r} exists already (id {existing})",
                       existing={"id": existing, "name": name})
