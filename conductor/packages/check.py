"""What ``fornace workflow check`` says of a workflow package, before it is accepted.

The API (which may not import the conductor) is given :func:`package_checker`
by the command that starts it: an uploaded package, unpacked in a temporary
folder, is checked by the same :func:`fornace.conductor.workflowcheck.inspect`
as workflow files on disk, its templates and scripts looked for as a job
looks for them (:class:`~fornace.conductor.templates.TemplateLayers`): in the
package first, then in the data folder (the API's ``data_dir``, which is the
conductors'), so a package may name the data folder's ``LinuxInstance`` or
its agent templates and scripts without shipping copies.  Its ``types.json``
is loaded as the conductor would load it (on top of the data folder's
catalog, whose types it may extend; nested no deeper than the ``[engine]
max_json_depth``, every ``pattern`` compiled by RE2), and the Heat template
each of its types' ``instance`` names must be found the same way.

Every problem is reported, not only the first: each workflow file's, each
script a plan names, each type of ``types.json``.  Problems are ``file:line:
message`` with the file relative to the package (the data folder's files
relative to it, as the package's are).

:func:`workflow_checker` is handed over the same way for the dashboard's
workflow file pages: one file of an environment's, checked against the
catalog folder it comes from (the data folder, or its package's, over the
data folder's).
"""
from __future__ import annotations

import functools
from pathlib import Path

from fornace.common.catalog import (Catalog, CatalogError, catalog_file, catalog_problems,
                                    load_catalog)
from fornace.common.errors import LocatedError
from fornace.common.jsonlimits import line_of, loads
from fornace.common.packages.checks import PackageCheck, WorkflowCheck
from fornace.common.resources import BUILTIN_DATA
from fornace.conductor.dsl.context import Templates
from fornace.conductor.dsl.limits import Limits
from fornace.conductor.templates import TemplateLayers, TemplateStore
from fornace.conductor.workflowcheck import inspect


def check_package(folder: Path, limits: Limits | None = None,
                  data_dir: Path | None = None) -> list[str]:
    """Every problem of the package unpacked in ``folder`` (empty: it may be
    stored); ``data_dir``: the data folder under it (default: the built-in one)."""
    limits = limits or Limits()
    data = Path(data_dir) if data_dir is not None else BUILTIN_DATA
    problems: list[str] = []
    workflows = folder / "workflows"
    if not workflows.is_dir():
        problems.append("workflows/: missing (a package holds at least one workflow file)")
    else:
        problems.extend(inspect([workflows], folder, limits, beneath=data).problems)
    types = folder / "types.json"
    if types.is_file():
        try:
            base = _catalog(catalog_file(data))
        except CatalogError as exc:
            problems.append(f"the data folder's catalog: {exc}")
        else:
            found = catalog_problems(types, base, limits.max_json_depth)
            problems.extend(found or _instance_problems(types, _templates(folder, data, limits)))
    return [_relative(p, (folder, data)) for p in problems]


@functools.lru_cache(maxsize=4)
def _catalog(path: Path) -> Catalog:
    """A data folder's catalog, read once (it changes with a restart only, as the
    conductors' and the API's)."""
    return load_catalog(path)


def _templates(folder: Path, data: Path, limits: Limits) -> Templates:
    return TemplateLayers([TemplateStore(folder, fallback=None, limits=limits),
                           TemplateStore(data, limits=limits)])


def _instance_problems(types: Path, templates: Templates) -> list[str]:
    """The package's types whose ``instance`` names a Heat template that neither
    the package nor the data folder has (the catalog loaded: well formed)."""
    text = types.read_text(encoding="utf-8")
    problems = []
    for name, entry in (loads(text, source=str(types)).get("types") or {}).items():
        template = ((entry or {}).get("instance") or {}).get("template")
        if template is None:
            continue
        try:
            templates.heat_template(template)
        except LocatedError as exc:
            line = line_of(text, ["types", name, "instance", "template"])
            problems.append(str(LocatedError(
                f"type {name!r}: instance template {template!r}: {exc}", str(types), line)))
    return problems


def _relative(problem: str, folders: tuple[Path, ...]) -> str:
    """A problem with the package's and the data folder's paths made relative."""
    for folder in folders:
        for prefix in {str(folder.resolve()) + "/", str(folder) + "/"}:
            problem = problem.replace(prefix, "")
    return problem


def package_checker(limits: Limits | None = None,
                    data_dir: Path | None = None) -> PackageCheck:
    """The check the API runs on uploads, with the ``[engine]`` limits on templates,
    over the data folder ``data_dir`` (default: the built-in one)."""
    return lambda folder: check_package(folder, limits, data_dir)


def check_workflow(path: Path, catalog: Path, limits: Limits | None = None,
                   data_dir: Path | None = None) -> list[str]:
    """What ``fornace workflow check`` finds in one workflow file whose templates
    are looked for in ``catalog``, then in the data folder ``data_dir`` (default:
    the built-in one), as a job's are: ``file:line: message`` lines, the file as
    given."""
    return inspect([path], catalog, limits,
                   beneath=data_dir if data_dir is not None else BUILTIN_DATA).problems


def workflow_checker(limits: Limits | None = None,
                     data_dir: Path | None = None) -> WorkflowCheck:
    """The check the API's workflow file pages show, with the ``[engine]`` limits."""
    return lambda path, catalog: check_workflow(path, catalog, limits, data_dir)
