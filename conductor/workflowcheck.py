"""``fornace workflow check`` over files and folders: each workflow file read
and given to the DSL's checker (:mod:`fornace.conductor.dsl.checker`) with
the templates of its catalog.

A workflow file's templates are those of its catalog (``data_dir``, else the
folder above its ``workflows/``), read within the ``[engine]`` limits; with
``beneath`` (a data folder), those its catalog lacks are looked for there,
as a job pinned to a workflow package looks for its templates and scripts in
the package first, then in the conductor's data folder
(:class:`~fornace.conductor.templates.TemplateLayers`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from fornace.common.errors import LocatedError
from fornace.conductor.dsl.checker import Findings, check_source
from fornace.conductor.dsl.context import Templates
from fornace.conductor.dsl.limits import Limits
from fornace.conductor.templates import TemplateLayers, TemplateStore
from fornace.conductor.workflowfiles import read_workflow_file


def expand(paths: list[str | Path]) -> tuple[list[Path], list[str]]:
    """Workflow files named directly or found (``*.xml``) in folders."""
    files: list[Path] = []
    problems: list[str] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found = sorted(path.glob("*.xml"))
            if not found:
                problems.append(f"{path}: no *.xml workflow files")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            problems.append(f"{path}: no such file or folder")
    return files, problems


def catalog_of(workflow_file: Path) -> Path:
    """The catalog a workflow file belongs to: the folder above ``workflows/``."""
    return workflow_file.resolve().parent.parent


def catalog_templates(data_dir: str | Path | None = None, limits: Limits | None = None,
                      beneath: str | Path | None = None) -> Callable[[Path], Templates]:
    """A workflow file -> the templates of its catalog (one store per catalog),
    over those of ``beneath`` when given."""
    stores: dict[Path, Templates] = {}
    under = None if beneath is None else TemplateStore(beneath, limits=limits)

    def templates(path: Path) -> Templates:
        catalog = Path(data_dir) if data_dir else catalog_of(path)
        if catalog not in stores:
            stores[catalog] = (TemplateStore(catalog, limits=limits) if under is None else
                               TemplateLayers([TemplateStore(catalog, fallback=None,
                                                             limits=limits), under]))
        return stores[catalog]
    return templates


def check(paths: list[str | Path], data_dir: str | Path | None = None,
          limits: Limits | None = None) -> list[str]:
    """All problems found, as ``file:line: message`` lines (empty when clean)."""
    return inspect(paths, data_dir, limits).problems


def inspect(paths: list[str | Path], data_dir: str | Path | None = None,
            limits: Limits | None = None, beneath: str | Path | None = None) -> Findings:
    """Problems and warnings of workflow files (``file:line: [warning: ]message``);
    ``beneath``: see :func:`catalog_templates`."""
    files, problems = expand(paths)
    found = Findings(problems)
    templates = catalog_templates(data_dir, limits, beneath)
    for path in files:
        try:
            data = read_workflow_file(path)
        except LocatedError as exc:
            found.problems.append(str(exc))
            continue
        one = check_source(data, str(path), templates(path))
        found.problems.extend(one.problems)
        found.warnings.extend(one.warnings)
    return found
