"""A job's trace for the dashboard: a timeline by round, and each task's rule.

The trace (:mod:`fornace.conductor.jobs.tracing`) is a flat list of events
per round; the page groups them the way an operator asks "why": each rule
that matched an object, with what it set and the actions it queued (and how
those ended), then the round's model changes in one list.  The job page
uses :func:`rules_of_tasks` to link each task to the rule that queued it.
"""
from __future__ import annotations

import json
from typing import Any

from fornace.api.errors import NotFound
from fornace.api.stores.jobs import Jobs
from fornace.api.context import Context
from fornace.api.stores.store import Store
from fornace.api.packages.workflows import plain_name
from fornace.common.tracetext import trace_events, unit_hosts


def _shown(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def place(at: Any) -> tuple[str, int] | None:
    """The workflow file and line of a trace event's ``at`` (``Deploy.xml:12``),
    for a link to that line of the environment's file page (None: not one)."""
    name, _, line = str(at or "").rpartition(":")
    if not plain_name(name) or not line.isdigit():
        return None
    return name, int(line)


def timeline(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The rounds of a trace document, grouped for the page."""
    outcomes: dict[Any, dict[str, Any]] = {}
    tasks: dict[Any, list[str]] = {}
    for event in trace_events(document):
        if event.get("e") == "ended":
            outcomes[event.get("n")] = event
        elif event.get("e") == "task":
            tasks.setdefault(event.get("n"), []).append(str(event.get("change")))
    rounds = []
    for entry in document.get("rounds") or []:
        rules: list[dict[str, Any]] = []
        changes, reports, ended = [], [], []
        current: dict[str, Any] | None = None
        queued_by: dict[Any, dict[str, Any]] = {}   # action number -> the row that queued it
        for event in entry.get("events") or []:
            kind = event.get("e")
            if kind == "rule":
                current = {**event, "sets": [], "queued": [], "place": place(event.get("at"))}
                rules.append(current)
            elif kind == "set":
                change = {**event, "shown": _shown(event.get("value"))}
                changes.append(change)
                if current is not None and current.get("rule") == event.get("rule"):
                    current["sets"].append(change)
            elif kind == "queued":
                action = {**event, "outcome": outcomes.get(event.get("n"), {}),
                          "tasks": tasks.get(event.get("n"), [])}
                if event.get("kind") == "operation":
                    # run by the lifecycle action itself (check, uninstall...): no rule
                    current = {"rule": f"operation {event.get('operation')}",
                               "desc": f"run by the {document.get('action')} action "
                                       f"({event.get('reason')}), not by a workflow",
                               "at": "", "sets": [], "queued": [], "place": None}
                    rules.append(current)
                elif current is None or current.get("rule") != event.get("rule"):
                    # queued outside a matched rule (the top level of a workflow)
                    current = {"rule": event.get("rule"), "at": event.get("at"),
                               "sets": [], "queued": [], "place": place(event.get("at"))}
                    rules.append(current)
                current["queued"].append(action)
                queued_by[event.get("n")] = current
            elif kind == "ended":
                ended.append(event)
                # what its <success>/<failure> block sets next belongs to that rule's match
                current = queued_by.get(event.get("n"))
            elif kind == "report":
                reports.append(event)
        rounds.append({"number": entry.get("round"), "rules": rules, "changes": changes,
                       "ended": ended, "reports": reports,
                       "passes": max((r.get("pass") or 1 for r in rules), default=0)})
    return rounds


def rules_of_tasks(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """change id of a task -> the rule that queued its action (``rule``, ``at``)."""
    queued = {e.get("n"): e for e in trace_events(document) if e.get("e") == "queued"}
    found = {}
    for event in trace_events(document):
        if (event.get("e") == "task" and event.get("n") in queued
                and queued[event["n"]].get("kind") != "operation"):
            action = queued[event["n"]]
            found[str(event.get("change"))] = {"rule": action.get("rule") or "(top level)",
                                               "at": action.get("at")}
    return found


def trace_of(jobs: Jobs, ctx: Context, env_id: str, job_id: str) -> dict[str, Any] | None:
    """The job's trace document, or None when it has none."""
    try:
        return jobs.trace(ctx, env_id, job_id)
    except NotFound:
        return None


def trace_page(store: Store, jobs: Jobs, ctx: Context, env_id: str,
               job_id: str) -> dict[str, Any]:
    """A job's trace page: its environment, the job, and the rounds (None: no trace)."""
    env = store.environments.get(ctx, env_id)
    job = jobs.get_job(ctx, env_id, job_id)   # 404 for a job that is not there
    document = trace_of(jobs, ctx, env_id, job_id)
    return {"env": env, "job": job, "trace": document,
            "hosts": unit_hosts(trace_events(document)),
            "rounds": timeline(document) if document is not None else []}
