"""``fornace why`` in the API's process: a rule explained on an environment's model.

The API may not import the conductor; the command that starts it hands it
:func:`rule_explainer` (as it hands it the workflow checker).  The rule is
looked for in the workflow files in effect for the environment (the data
folder's with its pinned packages', as a job runs them), and evaluated on the
model the environment's next deployment would start from: its ``temp`` cleared
but for its types' views (``temp.instance``, from the environment's catalog),
and the marks of changed units undone by change detection (the default
``evaluate`` mode), as the conductor does before the first round
(:func:`fornace.conductor.jobs.changes.prepare`).
"""
from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

from fornace.common.catalog import Catalog, with_type_views
from fornace.common.contract import clean_model
from fornace.common.errors import LocatedError, UnknownName
from fornace.common.packages.checks import RuleExplain
from fornace.conductor.dsl.why import explain_rule
from fornace.conductor.dsl.workflows import Workflow
from fornace.conductor.jobs import changes
from fornace.conductor.workflowfiles import load_workflow


@functools.lru_cache(maxsize=256)
def _compiled(path: str, mtime_ns: int, size: int) -> Workflow | None:
    """A workflow file compiled once per version of it (None: it does not compile)."""
    errors: list[LocatedError] = []
    return load_workflow(path, errors)


def _workflows(paths: list[Path]) -> tuple[list[Workflow], list[str]]:
    found, skipped = [], []
    for path in paths:
        try:
            status = path.stat()
        except OSError:
            skipped.append(path.name)
            continue
        workflow = _compiled(str(path), status.st_mtime_ns, status.st_size)
        if workflow is None:
            skipped.append(path.name)
        else:
            found.append(workflow)
    return found, skipped


def starting_model(model: dict[str, Any], mode: str = "evaluate",
                   catalog: Catalog | None = None) -> dict[str, Any]:
    """The model a deployment starts from (a copy): no ``temp`` but the views of
    the services' types (``temp.instance``, from ``catalog``), changed units'
    marks undone."""
    prepared = with_type_views(clean_model(copy.deepcopy(model)), catalog)
    changes.prepare(prepared, mode)
    return prepared


def explain(paths: list[Path], model: dict[str, Any], rule: str,
            unit: str | None = None, catalog: Catalog | None = None) -> dict[str, Any]:
    """What ``fornace why`` answers (see the module's docstring); ``catalog``: the
    environment's (its types' views are given to the services as a job gives them)."""
    workflows, skipped = _workflows(paths)
    try:
        answer = explain_rule(workflows, starting_model(model, catalog=catalog), rule, unit)
    except UnknownName as exc:
        if skipped:
            raise UnknownName(f"{exc} (not read, they do not compile: "
                              f"{', '.join(skipped)})", exc.close) from None
        raise
    if skipped:
        answer["skipped"] = skipped
    return answer


def rule_explainer() -> RuleExplain:
    """The explanation the API serves at ``/environments/{id}/why``."""
    return explain
