"""The ``agent_queues`` table: which broker queues were used for an environment.

Agent queues are named from the environment's, services' and units' ids
(``contract.agent_queue``); once an environment is deleted nothing else
knows those names.  The conductor writes each queue down before it first
sends on it, deletes an environment's queues when its deletion has removed
the stack, and ``fornace gc`` finds the queues of environments that are gone.
"""
from __future__ import annotations

from typing import Any, Iterable

from sqlalchemy import delete, insert, select

from fornace.common.db.inserts import insert_or_nothing
from fornace.common.db.models import AgentQueue, Environment, utcnow


def record(connection: Any, environment_id: str, names: Iterable[str]) -> None:
    """Write down ``names`` as queues of the environment (known ones stay)."""
    wanted = sorted(set(names))
    if not wanted:
        return
    # a row another conductor wrote at the same moment stands
    idempotent = insert_or_nothing(connection.dialect.name, AgentQueue)
    if idempotent is None:    # no insert that lets a known row stand: leave those out
        known = set(connection.scalars(select(AgentQueue.name).where(
            AgentQueue.name.in_(wanted))))
        wanted = [name for name in wanted if name not in known]
        if not wanted:
            return
    now = utcnow()
    # one statement per job (it runs for every deployment): known rows stand
    connection.execute(idempotent if idempotent is not None else insert(AgentQueue),
                       [{"name": name, "environment_id": environment_id, "created": now}
                        for name in wanted])


def of_environment(connection: Any, environment_id: str) -> list[str]:
    return list(connection.scalars(select(AgentQueue.name).where(
        AgentQueue.environment_id == environment_id).order_by(AgentQueue.name)))


def orphaned(connection: Any) -> dict[str, list[str]]:
    """environment id -> its queues, for the environments that are gone."""
    found: dict[str, list[str]] = {}
    rows = connection.execute(select(AgentQueue.environment_id, AgentQueue.name).where(
        AgentQueue.environment_id.not_in(select(Environment.id))).order_by(
        AgentQueue.environment_id, AgentQueue.name))
    for environment_id, name in rows:
        found.setdefault(environment_id, []).append(name)
    return found


def forget(connection: Any, names: Iterable[str]) -> None:
    wanted = list(names)
    if wanted:
        connection.execute(delete(AgentQueue).where(AgentQueue.name.in_(wanted)))
