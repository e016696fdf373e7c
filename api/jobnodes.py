"""A running job's node states (``deployments.nodes``, contract 1.5): the
states its task events say moved, merged into what it sent before.

The column holds every node of the job (50 KB at a thousand units) and each
``tasks`` event carries only those that moved.  Reading the column, merging
in Python and writing it back decoded and encoded the whole of it for every
batch of events; on PostgreSQL the merge is done by the database instead
(``jsonb ||``: the new state of a node replaces its old one, as a Python
``{**old, **new}`` does), and two API processes storing events of one job
at once lose neither's nodes (the UPDATE locks the row).  Elsewhere (SQLite:
one writer at a time, in-process) the column is read, merged and written in
the batch's transaction.
"""
from __future__ import annotations

import json
from typing import Any

from sqlalchemy import bindparam, select, text, update
from sqlalchemy.orm import Session as DbSession

from fornace.common.db.models import Job

Nodes = dict[str, dict[str, Any]]   # node id -> {"state": ..., "local": ...}

_MERGE_JSONB = text("UPDATE deployments SET nodes = "
                    "(COALESCE(nodes::jsonb, '{}'::jsonb) || CAST(:patch AS jsonb))::json "
                    "WHERE id = :job_id")
_REPLACE = update(Job.__table__).where(Job.__table__.c.id == bindparam("job_id")).values(
    nodes=bindparam("nodes", type_=Job.__table__.c.nodes.type))


def merge_nodes(db: DbSession, changes: dict[str, Nodes]) -> None:
    """Merge ``changes`` (job id -> the node states that moved) into the jobs' rows."""
    if not changes:
        return
    patches = {job_id: json.dumps(nodes) for job_id, nodes in changes.items()}
    if db.get_bind().dialect.name == "postgresql" and not any(
            "\\u0000" in patch for patch in patches.values()):   # jsonb holds no NUL
        db.execute(_MERGE_JSONB, [{"job_id": job_id, "patch": patch}
                                  for job_id, patch in patches.items()])
        return
    old = dict(db.execute(select(Job.id, Job.nodes).where(Job.id.in_(sorted(changes)))).all())
    merged = [{"job_id": job_id, "nodes": {**(old[job_id] or {}), **nodes}}
              for job_id, nodes in changes.items() if job_id in old]
    if merged:
        db.execute(_REPLACE, merged)
