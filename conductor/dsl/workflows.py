"""Workflows from their text: parse safely, check the root, bind functions.

Reading the files is the caller's (:mod:`fornace.conductor.workflowfiles`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fornace.common.errors import LocatedError, WorkflowError
from fornace.conductor.dsl import functions as dsl  # noqa: F401  (registers the DSL functions)
from fornace.conductor.dsl.engine import bind
from fornace.conductor.dsl.xmlload import Node, parse_bytes

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path


@dataclass
class Workflow:
    path: Path
    root: Node
    digest: str = ""   # of the file's bytes, set by its reader (change detection)


def compile_workflow(data: bytes, path: Path,
                     errors: list[LocatedError] | None = None) -> Workflow | None:
    """The workflow whose XML is ``data`` (from the file ``path``); with ``errors``
    given, collect problems there (and give None) instead of raising."""
    try:
        root = parse_bytes(data, str(path))
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
