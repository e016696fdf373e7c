"""Status and node state of units and services, kept in the object model.

Each unit has ``status``: ``local`` (ok, degraded, error, absent, pending,
unknown: how it relates to its description, as Unfurl users know it),
``state`` (the TOSCA node state: initial, creating, created, configuring,
configured, starting, started, stopping, stopped, deleting, deleted, error),
``lastChange`` and ``created`` (change ids), ``configs`` (what change
detection needs, see :mod:`fornace.conductor.jobs.changes`), ``resources`` (its stack
resources), and the user's ``customized`` / ``protected`` flags.  A
service's ``status`` sums up its units.  The workflows never read it.

While a job runs, each change of a node's state or status is also told to
the observer of the job's thread (:func:`observing`: the job's recorder,
which sends it to the API with the job's task events), so what the operator
sees moves with the job, not only when it ends; so does each change of its
hostname, address or URL (:func:`endpoint_changed`).
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Callable, Iterator

from fornace.common.contract import NODE_STATES, NODE_STATUSES

STATUSES = NODE_STATUSES   # the contract's names for them

Observer = Callable[[dict[str, Any]], None]   # told the unit or service whose status changed
_observer: contextvars.ContextVar[Observer | None] = contextvars.ContextVar(
    "fornace_node_observer", default=None)


@contextlib.contextmanager
def observing(observer: Observer) -> Iterator[None]:
    """Within the block (in this thread), every :func:`set_node` and
    :func:`summarize` tells ``observer`` the object it changed."""
    token = _observer.set(observer)
    try:
        yield
    finally:
        _observer.reset(token)


def _changed(obj: dict[str, Any]) -> None:
    observer = _observer.get()
    if observer is not None:
        observer(obj)


def endpoint_changed(obj: dict[str, Any]) -> None:
    """A unit's or service's ``state.hostname``, ``address`` or ``url`` changed:
    told to the observer as a status change is, so the API shows it while the
    job runs."""
    _changed(obj)


def status_of(obj: dict[str, Any]) -> dict[str, Any]:
    """The ``status`` object of a unit or service, created when missing."""
    status = obj.get("status")
    if not isinstance(status, dict):
        status = obj["status"] = {}
    return status


def set_node(obj: dict[str, Any], state: str | None = None, local: str | None = None,
             change_id: str | None = None) -> None:
    status = status_of(obj)
    if state is not None:
        status["state"] = state
    if local is not None:
        status["local"] = local
    if change_id is not None:
        status["lastChange"] = change_id
        status.setdefault("created", change_id)
    _changed(obj)


def flag(obj: dict[str, Any], name: str) -> bool:
    status = obj.get("status")
    return isinstance(status, dict) and bool(status.get(name))


def local(obj: dict[str, Any], default: str = "pending") -> str:
    status = obj.get("status")
    value = status.get("local") if isinstance(status, dict) else None
    return value if value in STATUSES else default


def summarize(service: dict[str, Any]) -> None:
    """A service's status from its units': all ok -> ok, some bad -> degraded,
    all bad -> error; pending while any unit is pending; absent when all are."""
    units = [u for u in service.get("units") or [] if isinstance(u, dict)]
    values = [local(u) for u in units]
    states = [status_of(u).get("state", "initial") for u in units]
    if not values:
        overall = "absent"
    elif all(v == "absent" for v in values):
        overall = "absent"
    elif all(v == "ok" for v in values):
        overall = "ok"
    elif any(v == "pending" for v in values):
        overall = "pending"
    elif all(v in ("error", "absent") for v in values):
        overall = "error"
    elif any(v in ("ok", "degraded") for v in values):
        overall = "degraded"    # some units work, not all
    else:
        overall = "unknown"
    status = status_of(service)
    status["local"] = overall
    status["state"] = _least(states)
    _changed(service)


def _least(states: list[str]) -> str:
    """The node state the service as a whole is in: the least advanced unit's
    (an error wins)."""
    if not states:
        return "initial"
    if "error" in states:
        return "error"
    return min(states, key=lambda s: NODE_STATES.index(s) if s in NODE_STATES else 0)
