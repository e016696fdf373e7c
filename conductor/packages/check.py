"""What ``fornace workflow check`` says of a workflow package, before it is accepted.

The API (which may not import the conductor) is given :func:`package_checker`
by the command that starts it: an uploaded package, unpacked in a temporary
folder, is checked by the same :func:`fornace.conductor.workflowcheck.inspect`
as workflow files on disk, against its own templates only (no fallback to
the built-in catalog: the package must hold what its workflows name), and
its ``types.json`` is loaded as the conductor would load it (on top of the
built-in catalog, whose types it may extend; nested no deeper than the
``[engine] max_json_depth``, every ``pattern`` compiled by RE2).  Problems are
``file:line: message`` with the file relative to the package.

:func:`workflow_checker` is handed over the same way for the dashboard's
workflow file pages: one file of an environment's, checked against the
catalog folder it comes from (the data folder, or its package's).
"""
from __future__ import annotations

from pathlib import Path

from fornace.common.catalog import CatalogError, builtin_catalog, load_catalog
from fornace.common.packages.checks import PackageCheck, WorkflowCheck
from fornace.conductor.dsl.limits import Limits
from fornace.conductor.workflowcheck import inspect


def check_package(folder: Path, limits: Limits | None = None) -> list[str]:
    """Every problem of the package unpacked in ``folder`` (empty: it may be stored)."""
    problems: list[str] = []
    workflows = folder / "workflows"
    if not workflows.is_dir():
        problems.append("workflows/: missing (a package holds at least one workflow file)")
    else:
        # the package's own templates only: one the built-in catalog has but the
        # package lacks is a problem
        problems.extend(inspect([workflows], folder, limits, builtin=False).problems)
    if (folder / "types.json").is_file():
        try:
            load_catalog(folder / "types.json", base=builtin_catalog(),
                         max_depth=(limits or Limits()).max_json_depth)
        except CatalogError as exc:
            problems.append(str(exc))
    prefix = str(folder.resolve()) + "/"
    return [p.replace(prefix, "").replace(str(folder) + "/", "") for p in problems]


def package_checker(limits: Limits | None = None) -> PackageCheck:
    """The check the API runs on uploads, with the ``[engine]`` limits on templates."""
    return lambda folder: check_package(folder, limits)


def check_workflow(path: Path, catalog: Path, limits: Limits | None = None) -> list[str]:
    """What ``fornace workflow check`` finds in one workflow file whose templates
    are looked for in ``catalog`` (then in the built-in catalog, as a job's are):
    ``file:line: message`` lines, the file as given."""
    return inspect([path], catalog, limits).problems


def workflow_checker(limits: Limits | None = None) -> WorkflowCheck:
    """The check the API's workflow file pages show, with the ``[engine]`` limits."""
    return lambda path, catalog: check_workflow(path, catalog, limits)
