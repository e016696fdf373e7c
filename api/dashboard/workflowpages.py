"""The dashboard's pages of an environment's workflow files: the files in
effect (from the data folder or a pinned package, what replaces what, how
many problems, how often their rules fired), one file's XML line by line,
with the check's problems and the rule firings of the environment's last
traced job shown at their lines, and a rule's page: does it match each unit
of the environment's model now, and if not, which step and clause refused it
(:mod:`fornace.api.packages.why`, as ``fornace why`` says it).

The files are read by :class:`~fornace.api.packages.workflows.WorkflowFiles`; the
firings come from the job's trace as the API serves it
(:meth:`~fornace.api.stores.jobs.Jobs.trace`: masked).  The file pages
need ``environment:show`` on the environment, as its own page does; a rule's
page quotes the model's values, so it needs ``environment:model`` too.
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
from fornace.api.errors import NotFound, Unavailable
from fornace.api.packages.why import explain_rule
from fornace.api.stores.jobs import Jobs
from fornace.api.context import Context
from fornace.api.stores.store import Store
from fornace.api.packages.workflows import Problem, WorkflowFile, WorkflowFiles
from fornace.common.tracetext import trace_events

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
    for event in trace_events(document):
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
    rules = rule_places(text)
    lines = [{"number": n, "text": line, "problems": at.get(n, []), "firing": here.get(n),
              "rule": rules.get(n)} for n, line in enumerate(text, start=1)]
    elsewhere = sorted(n for n in set(at) | set(here) if n > len(lines))
    return {"env": env, "file": found, "lines": lines, "cut": cut, "problems": problems,
            "job": job, "fired": sum(f.count for f in here.values()),
            "fired_lines": len(here), "beyond": elsewhere}


def rule_places(text: list[str]) -> dict[int, int]:
    """line where a ``<rule`` starts -> the line where its start tag ends (the
    rule's place, as the engine and the traces number it)."""
    places: dict[int, int] = {}
    for number, line in enumerate(text, start=1):
        start = line.find("<rule")
        if start < 0 or line[start + 5:start + 6] not in ("", " ", "\t", ">", "/"):
            continue
        quote = None
        for at, piece in enumerate(text[number - 1:number + 49], start=number):
            for char in piece[start:] if at == number else piece:
                if quote:
                    quote = None if char == quote else quote
                elif char in "'\"":
                    quote = char
                elif char == ">":
                    places[number] = at
                    break
            if number in places:
                break
    return places


def rule_page(store: Store, jobs: Jobs, files: WorkflowFiles, ctx: Context, env_id: str,
              name: str, line: int, unit: str | None) -> dict[str, Any]:
    """A rule's page values: the file, the rule and, per object, whether it matches
    (an unknown unit: the answer for every object and the error)."""
    env = store.environments.get(ctx, env_id)
    found, _ = files.file(env["id"], name)
    error = None
    try:
        answer = explain_rule(store, files, ctx, env["id"], f"{found.name}:{line}", unit)
    except NotFound as exc:
        if unit is None:
            raise
        error = exc.message
        answer = explain_rule(store, files, ctx, env["id"], f"{found.name}:{line}")
    return {"env": env, "file": found, "line": line, "answer": answer, "unit": unit,
            "error": error}


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


@router.get("/environments/{env_id}/workflows/{name}/rules/{line}")
async def workflow_rule(env_id: str, name: str, line: int, request: Request,
                        unit: str | None = None) -> Response:
    ctx = await caller(request, "environment:show", "environment:model", env_id=env_id)
    page = await _run(rule_page, request.app.state.store, request.app.state.jobs,
                      _files(request), ctx, env_id, name, line, unit or None)
    return render(request, "workflow_rule.html", status=404 if page["error"] else 200, **page)
