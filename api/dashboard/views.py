"""What each page shows, gathered from the Store and Jobs (blocking calls).

The routes run these in the thread pool; each returns plain values for a
template.  Everything comes from the API's own views, which mask secrets.
"""
from __future__ import annotations

import ast
import json
import re
from typing import Any

from fornace.api.dashboard import graph
from fornace.api.dashboard.display import shown_status, when
from fornace.api.dashboard.listing import paginate, query_text
from fornace.api.dashboard.readable import details_text, readable
from fornace.api.dashboard.serviceform import ServiceChoice
from fornace.api.dashboard.sessions import open_session
from fornace.api.errors import NotFound
from fornace.api.stores.jobs import Jobs
from fornace.api.outputs import environment_outputs
from fornace.api.jobstate import BUSY
from fornace.api.context import Context
from fornace.api.stores.store import Store
from fornace.common import topology as topology_model

_VOLATILE = ("created", "updated", "status")  # not a change the user made

# Jobs that deploy or tear down the environment's description; the others
# (plan, check, heal, scale, execute_operation) are "other actions".
DEPLOYMENT_ACTIONS = ("deploy", "install", "uninstall", "delete")
JOB_KINDS = {"deployments": "Deployments", "actions": "Other actions", "all": "All jobs"}
RECENT_JOBS = 8      # of each kind, on an environment's page


def job_kind(action: str) -> str:
    """``deployments`` or ``actions``: which list a job of ``action`` is in."""
    return "deployments" if action in DEPLOYMENT_ACTIONS else "actions"


def outcome(job: dict[str, Any] | None) -> dict[str, str] | None:
    """How ``job`` ended, as a page's message (``level``, ``text``); None while it runs."""
    if not job or job.get("finished") is None:
        return None
    state = str(job["state"])
    what = {"deploy": "Deployment", "delete": "Deletion"}.get(job["action"],
                                                             f"Job {job['action']}")
    shown = state.replace("_w_", " with ").replace("_", " ")
    return {"level": "ok" if state == "success" else "error",
            "text": f"{what} ended at {when(job['finished'])}: {shown}."}


def _split(history: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    kinds: dict[str, list[dict[str, Any]]] = {"deployments": [], "actions": []}
    for job in history:
        kinds[job_kind(job["action"])].append(job)
    return kinds


def environment_rows(store: Store, jobs: Jobs, ctx: Context, query: str | None = None,
                     status: str | None = None, page: str | None = None,
                     per_page: str | None = None, every_tenant: bool = False) -> dict[str, Any]:
    """A page of the environments (the caller's project's, or every project's)
    whose name contains ``query`` and whose status is ``status``, by name, each
    with its last deployment and the job running on it."""
    query, status = query_text(query), query_text(status)
    every = store.environments.list(ctx, every_tenant=every_tenant)
    kept = [env for env in every
            if query.casefold() in env["name"].casefold() and status in ("", shown_status(env))]
    kept.sort(key=lambda env: (env["name"].casefold(), env["created"] or ""))
    listing = paginate(kept, page, per_page, {"q": query, "status": status,
                                              "all_tenants": "1" if every_tenant else ""})
    rows = []
    for env in listing.items:
        history = jobs.list_jobs(ctx, env["id"])
        deployments = _split(history)["deployments"]
        running = history[0] if history and history[0]["finished"] is None else None
        rows.append({**env, "busy": env["status"] in BUSY, "running": running,
                     "last_job": deployments[0] if deployments else None})
    return {"rows": rows, "listing": listing, "query": query, "wanted_status": status,
            "statuses": sorted({shown_status(env) for env in every}), "count": len(every),
            "busy": any(row["busy"] for row in rows), "every_tenant": every_tenant}


def all_jobs(store: Store, jobs: Jobs, ctx: Context, kind: str | None = None,
             env_id: str | None = None, query: str | None = None, state: str | None = None,
             page: str | None = None, per_page: str | None = None) -> dict[str, Any]:
    """A page of the jobs of the caller's environments (or of one), newest
    first: deployments, other actions or all, filtered by state and by a text
    found in the action or the environment's name."""
    kind = kind if kind in JOB_KINDS else "deployments"
    query, state = query_text(query), query_text(state)
    envs = store.environments.list(ctx)
    environment = None
    if env_id:
        environment = next((env for env in envs if env["id"] == env_id), None)
        if environment is None:
            raise NotFound(f"environment {env_id[:80]} not found")
        envs = [environment]
    found = []
    for env in envs:
        found.extend({**job, "environment_name": env["name"], "kind": job_kind(job["action"])}
                     for job in jobs.list_jobs(ctx, env["id"]))
    found.sort(key=lambda j: j.get("started") or "", reverse=True)
    counts = {name: 0 for name in JOB_KINDS}
    needle = query.casefold()
    kept = []
    for job in found:
        if state and job["state"] != state:
            continue
        if needle and needle not in job["action"].casefold() \
                and needle not in job["environment_name"].casefold():
            continue
        counts[job["kind"]] += 1
        counts["all"] += 1
        if kind in ("all", job["kind"]):
            kept.append(job)
    listing = paginate(kept, page, per_page,
                       {"kind": kind, "env": env_id or "", "q": query, "state": state})
    return {"jobs": listing.items, "listing": listing, "kind": kind, "kinds": JOB_KINDS,
            "counts": counts, "environment": environment, "query": query, "state": state,
            "states": sorted({job["state"] for job in found})}


def service_choices(store: Store, ctx: Context, env_id: str,
                    exclude: str | None = None) -> list[ServiceChoice]:
    """The environment's services (its session's, when one is open) but
    ``exclude``: what a service may depend on."""
    session = open_session(store, ctx, env_id)
    env = store.environments.get(ctx, env_id, session["id"] if session else None)
    return [ServiceChoice(str(s["id"]), str(s.get("name") or s["id"]), str(s.get("type")))
            for s in env["services"]
            if isinstance(s, dict) and s.get("id") and str(s["id"]) != exclude]


def environment_overview(store: Store, jobs: Jobs, ctx: Context,
                         env_id: str) -> dict[str, Any]:
    """An environment page: status, services and units, topology, session, jobs."""
    env = store.environments.get(ctx, env_id)
    session = open_session(store, ctx, env_id)
    session_id = session["id"] if session else None
    history = jobs.list_jobs(ctx, env_id)
    running = history[0] if history and history[0]["finished"] is None else None
    services = (store.environments.get(ctx, env_id, session_id)["services"] if session_id
                else env["services"])   # during a first deployment, those it deploys
    status, outputs = jobs.status_and_outputs(ctx, env_id, session_id)
    statuses, sent = _status_by_id(status["services"])
    view = topology_model.build({"services": services},
                                store.environment_catalog(env_id)).view()
    last = history[0] if history else None
    kinds = _split(history)
    busy = env["status"] in BUSY
    return {"env": env, "busy": busy, "session": session,
            "outcome": None if busy else outcome(last),
            "changes": pending_changes(env["services"], services) if session else [],
            "services": _service_rows(services, statuses, sent),
            "deployments": kinds["deployments"][:RECENT_JOBS],
            "actions": kinds["actions"][:RECENT_JOBS],
            "job_counts": {name: len(found) for name, found in kinds.items()},
            "running": running, "topology": graph.render(view, statuses),
            "problems": view["problems"],
            "outputs": outputs if running else environment_outputs(env),
            "reports": (shown_reports(store.reports.of_deployment(ctx, env_id, last["id"],
                                                                  [])[-15:])
                        if last else [])}


_ENDPOINTS = ("hostname", "address")


def _status_by_id(services: list[dict[str, Any]],
                  ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Each node's status, and its endpoints as the status shows them (a running
    job's as it sends them), by id."""
    found: dict[str, dict[str, Any]] = {}
    sent: dict[str, dict[str, Any]] = {}
    for node in [n for service in services for n in (service, *service["units"])]:
        found[node["id"]] = node["status"]
        sent[node["id"]] = {key: node.get(key) for key in _ENDPOINTS if node.get(key)}
    return found, sent


def _service_rows(services: list[Any], statuses: dict[str, dict[str, Any]],
                  sent: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The rows of the services table; ``sent``: endpoints by id (a running job's)
    shown where the model has none yet."""
    sent = sent or {}
    rows = []
    for service in services:
        if not isinstance(service, dict):
            continue
        units = []
        for unit in service.get("units") or []:
            if isinstance(unit, dict):
                state = unit.get("state") if isinstance(unit.get("state"), dict) else {}
                known = sent.get(unit.get("id")) or {}
                units.append({"id": unit.get("id"), "name": unit.get("name"),
                              "hostname": state.get("hostname") or known.get("hostname"),
                              "address": state.get("address") or known.get("address"),
                              "status": statuses.get(unit.get("id"), {})})
        state = service.get("state") if isinstance(service.get("state"), dict) else {}
        rows.append({"id": service.get("id"), "name": service.get("name"),
                     "type": service.get("type"), "units": units,
                     "address": (state.get("address")      # a farm's load balancer
                                 or (sent.get(service.get("id")) or {}).get("address")),
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
    env = store.environments.get(ctx, env_id)
    job = jobs.get_job(ctx, env_id, job_id)
    for task in job["tasks"]:
        task["summary_text"] = readable(summary_text(task.get("summary")))
    return {"env": env, "job": job, "busy": job["finished"] is None,
            "kind": job_kind(job["action"]), "outcome": outcome(job),
            "reports": shown_reports(store.reports.of_deployment(ctx, env_id, job_id, []))}


def shown_reports(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Reports with their text and details as a person reads them
    (:mod:`fornace.api.dashboard.readable`)."""
    return [{**report, "text": readable(report.get("text")),
             "details": details_text(report.get("details"))} for report in reports]


# an older conductor wrote a result list as a Python repr: "ok: ['serving ...']"
_REPR_SUMMARY = re.compile(r"(?P<head>[^\[{:]{1,40}): (?P<value>[\[{].*[\]}])", re.S)
_REPR_LIMIT = 20_000


def summary_text(summary: str | None) -> str:
    """A task summary as text.  The conductor writes text (``ok: serving
    http://...``); a summary an older one wrote as a Python repr of a list of
    texts reads as they are now written (joined with "; "), other reprs as
    JSON.  Anything else is shown as it is."""
    if not summary:
        return ""
    found = _REPR_SUMMARY.fullmatch(summary) if len(summary) <= _REPR_LIMIT else None
    if found is None:
        return summary
    literal = found.group("value")
    try:
        json.loads(literal)
        return summary                     # JSON already: written as text
    except ValueError:
        pass
    try:
        value = ast.literal_eval(literal)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return summary
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        text = "; ".join(value)
    elif isinstance(value, (list, dict)):
        text = json.dumps(value, ensure_ascii=False, default=str)
    else:
        return summary
    return f"{found.group('head')}: {text}"


def deletion(store: Store, jobs: Jobs, ctx: Context, env_id: str) -> dict[str, Any]:
    """The delete page: the environment, and while it is busy the job that runs
    (deleting is refused until it ends; forgetting abandons it)."""
    env = store.environments.get(ctx, env_id)
    busy = env["status"] in BUSY
    history = jobs.list_jobs(ctx, env_id) if busy else []
    running = history[0] if history and history[0]["finished"] is None else None
    return {"env": env, "busy": busy, "running": running}


def removal(store: Store, ctx: Context, env_id: str, service_id: str) -> dict[str, Any]:
    """What removing a service means: the service (as the session or the
    deployment has it), its units, and the services that depend on it."""
    session = open_session(store, ctx, env_id)
    env = store.environments.get(ctx, env_id)
    services = store.environments.get(ctx, env_id, session["id"])["services"] if session \
        else env["services"]
    service = next((s for s in services if isinstance(s, dict)
                    and str(s.get("id")) == service_id), None)
    if service is None:
        raise NotFound(f"service {service_id[:80]} not found in environment {env_id}")
    view = topology_model.build({"services": services},
                                store.environment_catalog(env_id)).view()
    names = {str(s.get("id")): s.get("name") or s.get("id") for s in services
             if isinstance(s, dict)}
    dependents = sorted({names.get(str(e["source"]), str(e["source"]))
                         for e in view.get("edges", [])
                         if e.get("kind") == "depends_on" and str(e.get("target")) == service_id})
    deployed = any(isinstance(s, dict) and str(s.get("id")) == service_id
                   for s in env["services"])
    units = [u for u in service.get("units") or [] if isinstance(u, dict)]
    return {"env": env, "service": service, "units": units, "dependents": dependents,
            "deployed": deployed, "busy": env["status"] in BUSY}
