"""The Murano 0.2 wire views of the stored rows: environments, configuration
sessions, deployments and their reports, with times as the API shows them."""
from __future__ import annotations

import datetime
from typing import Any

from fornace.common.db.models import ConfigSession, Job, Status
from fornace.common.secrets import masked


def iso(value: datetime.datetime | None) -> str | None:
    """A stored time to the second, ISO 8601 without a zone (as 0.2 shows them)."""
    # == value.replace(microsecond=0).isoformat(), in one call
    return value.isoformat(timespec="seconds") if value is not None else None


def utc(value: datetime.datetime | None) -> str | None:
    """A stored (naive UTC) time as ISO 8601 with its zone: ``2026-11-25T17:29:19Z``."""
    shown = iso(value)
    return f"{shown}Z" if shown is not None else None


def env_view(env: Any, status: str) -> dict[str, Any]:
    """An environment (an ``Environment`` or a row of its columns) as shown."""
    return env_row_view(env.id, env.name, env.created, env.updated, env.tenant_id,
                        env.version, status, env.region)


def env_row_view(env_id: str, name: str, created: datetime.datetime | None,
                 updated: datetime.datetime | None, tenant_id: str, version: int,
                 status: str, region: str | None = None) -> dict[str, Any]:
    """:func:`env_view` of the columns a list query selects (no ORM object);
    ``region``: the OpenStack region given at creation (null: none)."""
    return {"id": env_id, "name": name, "created": iso(created), "updated": iso(updated),
            "tenant_id": tenant_id, "version": version, "status": status, "region": region}


def session_view(session: ConfigSession) -> dict[str, Any]:
    return {"id": session.id, "environment_id": session.environment_id,
            "created": iso(session.created), "updated": iso(session.updated),
            "user_id": session.user_id, "version": session.version, "state": session.state}


def deployment_view(deployment: Job, secret_keys: frozenset[str]) -> dict[str, Any]:
    """A job as a 0.2 deployment; its description's secret fields masked (stored
    masked too; a row an older version wrote leaks none either): those named
    like passwords and ``secret_keys``, its environment's declared ones."""
    return {"id": deployment.id, "environment_id": deployment.environment_id,
            "state": deployment.state, "started": iso(deployment.started),
            "finished": iso(deployment.finished), "created": iso(deployment.created),
            "updated": iso(deployment.updated),
            "description": masked(deployment.description, keys=secret_keys)}


def report_view(status: Status) -> dict[str, Any]:
    """A report (a row of ``statuses``) as shown."""
    return {"id": status.id, "deployment_id": status.deployment_id, "entity": status.entity,
            "entity_id": status.entity_id, "text": status.text, "details": status.details,
            "level": status.level, "created": iso(status.created),
            "updated": iso(status.updated)}
