"""Loading workflow files: parse safely, check the root, bind functions."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fornace.common.errors import LocatedError, WorkflowError
from fornace.conductor.dsl import functions as dsl  # noqa: F401  (registers the DSL functions)
from fornace.conductor.dsl.engine import bind
from fornace.conductor.dsl.xmlload import Node, parse_file


@dataclass
class Workflow:
    path: Path
    root: Node


def load_workflow(path: str | Path, errors: list[LocatedError] | None = None) -> Workflow | None:
    """Load one file; with ``errors`` given, collect problems instead of raising."""
    path = Path(path)
    try:
        root = parse_file(path)
        problem = root_problem(root)
        if problem is not None:
            raise problem
    except LocatedError as exc:
        if errors is None:
            raise
        errors.append(exc)
        return None
    before = len(errors) if errors is not None else 0
    bind(root, errors)
    if errors is not None and len(errors) > before:
        return None
    return Workflow(path, root)


def root_problem(root: Node) -> WorkflowError | None:
    if root.tag != "workflow":
        return WorkflowError(f"root element must be <workflow>, not <{root.tag}>",
                             root.file, root.line)
    return None


def workflow_files(folder: str | Path) -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise WorkflowError(f"workflow folder not found: {folder}")
    return sorted(folder.glob("*.xml"))


def load_workflows(folder: str | Path) -> list[Workflow]:
    """All ``*.xml`` files of a folder, in sorted order (0.2 semantics).

    Every file is read before anything is refused: one problem raises that
    problem (its file and line), several raise one error listing them all.
    """
    errors: list[LocatedError] = []
    loaded = [load_workflow(path, errors) for path in workflow_files(folder)]
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise WorkflowError(f"{len(errors)} problems in the workflow files of {folder}:\n"
                            + "\n".join(f"  {error}" for error in errors))
    return [workflow for workflow in loaded if workflow is not None]
