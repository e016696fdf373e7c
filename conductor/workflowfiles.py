"""Reading workflow files from disk, for the DSL to compile.

A folder's ``*.xml`` files are its workflows, run in sorted order (0.2
semantics); a file that cannot be read is a :class:`WorkflowError` naming
it, as a syntax error is.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from fornace.common.errors import LocatedError, WorkflowError
from fornace.conductor.dsl.workflows import Workflow, compile_workflow


def read_workflow_file(path: str | Path) -> bytes:
    """The bytes of a workflow file (:class:`WorkflowError` naming it if unreadable)."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise WorkflowError(f"cannot read file: {exc.strerror}", str(path)) from None


def load_workflow(path: str | Path, errors: list[LocatedError] | None = None) -> Workflow | None:
    """Load one file; with ``errors`` given, collect problems instead of raising."""
    path = Path(path)
    try:
        data = read_workflow_file(path)
    except LocatedError as exc:
        if errors is None:
            raise
        errors.append(exc)
        return None
    workflow = compile_workflow(data, path, errors)
    if workflow is not None:
        workflow.digest = hashlib.sha256(data).hexdigest()[:16]
    return workflow


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
