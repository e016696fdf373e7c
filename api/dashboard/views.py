"""What each page shows, gathered from the Store and Jobs (blocking calls).

The routes run these in the thread pool; each returns plain values for a
template.  Everything comes from the API's own views, which mask secrets.
"""
from __future__ import annotations

from typing import Any

from fornace.api.dashboard import graph
from fornace.api.dashboard.sessions import open_session
from fornace.api.jobstore import Jobs
from fornace.api.store import BUSY, Context, Store
from fornace.common import topology as topology_model

_VOLATILE = ("created", "updated", "status")  # not a change the user made


def environment_rows(store: Store, jobs: Jobs, ctx: Context) -> list[dict[str, Any]]:
    """The environments with their last job."""
    rows = []
    for env in store.list_environments(ctx):
        history = jobs.list_jobs(ctx, env["id"])
        rows.append({**env, "busy": env["status"] in BUSY,
                     "last_job": history[0] if history else None})
    return rows


def all_jobs(store: Store, jobs: Jobs, ctx: Context) -> list[dict[str, Any]]:
    """Every job of the caller's environments, newest first."""
    found = []
    for env in store.list_environments(ctx):
        found.extend({**job, "environment_name": env["name"]}
                     for job in jobs.list_jobs(ctx, env["id"]))
    return sorted(found, key=lambda j: j.get("started") or "", reverse=True)


def environment_overview(store: Store, jobs: Jobs, ctx: Context,
                         env_id: str) -> dict[str, Any]:
    """An environment page: status, services and units, topology, session, jobs."""
    env = store.get_environment(ctx, env_id)
    session = open_session(store, ctx, env_id)
    session_id = session["id"] if session else None
    history = jobs.list_jobs(ctx, env_id)
    running = history[0] if history and history[0]["finished"] is None else None
    services = _shown_services(store, ctx, env, session_id, running)
    status = jobs.status(ctx, env_id, session_id)
    statuses = _status_by_id(status["services"])
    view = topology_model.build({"services": services}, store.catalog).view()
    last = history[0] if history else None
    return {"env": env, "busy": env["status"] in BUSY, "session": session,
            "changes": pending_changes(env["services"], services) if session else [],
            "services": _service_rows(services, statuses), "jobs": history[:10],
            "running": running, "topology": graph.render(view, statuses),
            "problems": view["problems"],
            "reports": store.reports(ctx, env_id, last["id"], [])[-15:] if last else []}


def _shown_services(store: Store, ctx: Context, env: dict[str, Any], session_id: str | None,
                    running: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The session's services when one is open; while a first deployment runs,
    the services it deploys; else the deployed ones."""
    if session_id:
        return store.get_environment(ctx, env["id"], session_id)["services"]
    if env["version"] == 0 and running is not None:
        for deployment in store.list_deployments(ctx, env["id"]):
            if deployment["id"] == running["id"]:
                return (deployment["description"] or {}).get("services") or []
    return env["services"]


def _status_by_id(services: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for service in services:
        found[service["id"]] = service["status"]
        for unit in service["units"]:
            found[unit["id"]] = unit["status"]
    return found


def _service_rows(services: list[Any], statuses: dict[str, dict[str, Any]],
                  ) -> list[dict[str, Any]]:
    rows = []
    for service in services:
        if not isinstance(service, dict):
            continue
        units = []
        for unit in service.get("units") or []:
            if isinstance(unit, dict):
                state = unit.get("state") if isinstance(unit.get("state"), dict) else {}
                units.append({"id": unit.get("id"), "name": unit.get("name"),
                              "hostname": state.get("hostname"),
                              "address": state.get("address"),
                              "status": statuses.get(unit.get("id"), {})})
        rows.append({"id": service.get("id"), "name": service.get("name"),
                     "type": service.get("type"), "units": units,
                     "status": statuses.get(service.get("id"), {})})
    return rows


def _comparable(service: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in service.items() if k not in _VOLATILE}
    if isinstance(kept.get("units"), list):
        kept["units"] = [{k: v for k, v in u.items() if k not in _VOLATILE}
                         if isinstance(u, dict) else u for u in kept["units"]]
    return kept


def pending_changes(deployed: list[Any], proposed: list[Any]) -> list[dict[str, Any]]:
    """What deploying the session would change: services added, changed, removed."""
    before = {s.get("id"): s for s in deployed if isinstance(s, dict)}
    after = {s.get("id"): s for s in proposed if isinstance(s, dict)}
    changes = []
    for sid, service in after.items():
        if sid not in before:
            changes.append({"kind": "added", "service": service})
        elif _comparable(service) != _comparable(before[sid]):
            changes.append({"kind": "changed", "service": service})
    changes.extend({"kind": "removed", "service": service}
                   for sid, service in before.items() if sid not in after)
    return changes


def job_page(store: Store, jobs: Jobs, ctx: Context, env_id: str,
             job_id: str) -> dict[str, Any]:
    """A job with its tasks and their logs, and the reports it sent."""
    env = store.get_environment(ctx, env_id)
    job = jobs.get_job(ctx, env_id, job_id)
    return {"env": env, "job": job, "busy": job["finished"] is None,
            "reports": store.reports(ctx, env_id, job_id, [])}
