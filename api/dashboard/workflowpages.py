"""The dashboard's pages of an environment's workflow files: the files in
effect (from the data folder or a pinned package, what replaces what, how
many problems, how often their rules fired) and one file's XML line by line,
with the check's problems and the rule firings of the environment's last
traced job shown at their lines.

The files are read by :class:`~fornace.api.packages.workflows.WorkflowFiles`; the
firings come from the job's trace as the API serves it
(:meth:`~fornace.api.stores.jobs.Jobs.trace`: masked).  Both pages need
``environment:show`` on the environment, as its own page does.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from fornace.api.routing import run
from fornace.api.dashboard.access import caller
from fornace.api.dashboard.pages import render
from fornace.api.dashboard.traceview import place, trace_of
from fornace.api.errors import Unavailable
from fornace.api.stores.jobs import Jobs
from fornace.api.context import Context
from fornace.api.stores.store import Store
from fornace.api.packages.workflows import Problem, WorkflowFile, WorkflowFiles

router = APIRouter()
_run = run   # a request that finds a connection dead is run once more

OBJECTS_SHOWN = 5     # the objects a line's rule matched, shown (then "and N more")


@dataclass
class Firing:
    """The matches of the rule at one line in a trace."""

    count: int = 0
    rules: list[str] = field(default_factory=list)      # rule ids (a rule has one)
    descs: list[str] = field(default_factory=list)
    matched: dict[str, None] = field(default_factory=dict)  # distinct objects, in order

    @property
    def objects(self) -> list[str]:
        """The first :data:`OBJECTS_SHOWN` distinct objects matched."""
        return list(self.matched)[:OBJECTS_SHOWN]

    @property
    def more(self) -> int:
        """How many other distinct objects it matched."""
        return max(0, len(self.matched) - OBJECTS_SHOWN)

    def add(self, event: dict[str, Any]) -> None:
        self.count += 1
        for kept, value in ((self.rules, event.get("rule")), (self.descs, event.get("desc"))):
            if value and str(value) not in kept:
                kept.append(str(value))
        if event.get("object"):
            self.matched.setdefault(str(event["object"]), None)


def firings(document: dict[str, Any] | None) -> dict[str, dict[int, Firing]]:
    """file name -> line -> the rule matches recorded there (``rule`` events)."""
    found: dict[str, dict[int, Firing]] = {}
    for entry in (document or {}).get("rounds") or []:
        for event in entry.get("events") or []:
            if event.get("e") != "rule":
                continue
            where = place(event.get("at"))
            if where is not None:
                found.setdefault(where[0], {}).setdefault(where[1], Firing()).add(event)
    return found


def _files(request: Request) -> WorkflowFiles:
    files = request.app.state.workflow_files
    if files is None:
        raise Unavailable("workflow files are unavailable: this dashboard was started "
                          "without them")
    return files


def _traced_job(files: WorkflowFiles, jobs: Jobs, ctx: Context,
                env_id: str) -> tuple[dict[str, Any] | None, dict[str, dict[int, Firing]]]:
    """The environment's last job with a trace (None: none) and its firings."""
    job_id = files.last_traced_job(env_id)
    if job_id is None:
        return None, {}
    job = jobs.get_job(ctx, env_id, job_id)
    return job, firings(trace_of(jobs, ctx, env_id, job_id))


def _row(files: WorkflowFiles, found: WorkflowFile,
         fired: dict[str, dict[int, Firing]]) -> dict[str, Any]:
    problems = files.problems(found)
    return {"name": found.name, "source": found.source, "package": found.package,
            "replaces": found.replaces,
            "problems": None if problems is None else len(problems),
            "fired": sum(f.count for f in fired.get(found.name, {}).values())}


def workflows_page(store: Store, jobs: Jobs, files: WorkflowFiles, ctx: Context,
                   env_id: str) -> dict[str, Any]:
    """The list page's values: the environment, a row per file in effect, the
    notes of what could not be read, the traced job."""
    env = store.environments.get(ctx, env_id)     # 404, or 403 for another project's
    listing = files.listing(env["id"])
    job, fired = _traced_job(files, jobs, ctx, env["id"])
    return {"env": env, "rows": [_row(files, f, fired) for f in listing.files],
            "notes": listing.notes, "job": job, "checked": files.check is not None}


def file_page(store: Store, jobs: Jobs, files: WorkflowFiles, ctx: Context, env_id: str,
              name: str) -> dict[str, Any]:
    """One file's page values: its lines, each with its problems and firing."""
    env = store.environments.get(ctx, env_id)
    found, _ = files.file(env["id"], name)
    text, cut = files.text(found)
    problems = files.problems(found)
    job, fired = _traced_job(files, jobs, ctx, env["id"])
    here = fired.get(found.name, {})
    at: dict[int, list[Problem]] = {}
    for problem in problems or []:
        if problem.line is not None:
            at.setdefault(problem.line, []).append(problem)
    lines = [{"number": n, "text": line, "problems": at.get(n, []), "firing": here.get(n)}
             for n, line in enumerate(text, start=1)]
    elsewhere = sorted(n for n in set(at) | set(here) if n > len(lines))
    return {"env": env, "file": found, "lines": lines, "cut": cut, "problems": problems,
            "job": job, "fired": sum(f.count for f in here.values()),
            "fired_lines": len(here), "beyond": elsewhere}


@router.get("/environments/{env_id}/workflows")
async def workflow_list(env_id: str, request: Request) -> Response:
    ctx = await caller(request, "environment:show", env_id=env_id)
    page = await _run(workflows_page, request.app.state.store, request.app.state.jobs,
                      _files(request), ctx, env_id)
    return render(request, "workflows.html", **page)


@router.get("/environments/{env_id}/workflows/{name}")
async def workflow_file(env_id: str, name: str, request: Request) -> Response:
    ctx = await caller(request, "environment:show", env_id=env_id)
    page = await _run(file_page, request.app.state.store, request.app.state.jobs,
                      _files(request), ctx, env_id, name)
    return render(request, "workflow_file.html", **page)
