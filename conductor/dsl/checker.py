"""``fornace workflow check``: find problems in workflow files before a deployment does.

Reports every problem as ``file:line: message``: XML syntax, the root
element, unknown functions, filter and JSONPath syntax (queries given as
``<parameter>`` text with calls in it too), ``<parameter>`` names a function
does not know, and templates (and their scripts) that a constant
``template=`` names but the catalog does not have, cannot be read (outside
the catalog, over the limits) or cannot be parsed.

Warnings (``file:line: warning: message``) name what the safe XML parser
ignored: a DOCTYPE, entity declarations and entity references.  They do not
make the check fail.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from fornace.common.cursor import split_prefix
from fornace.common.errors import LocatedError, WorkflowError
from fornace.conductor.dsl import functions as dsl  # noqa: F401  (registers the DSL functions)
from fornace.conductor.dsl.engine import FUNCTIONS, bind
from fornace.conductor.dsl.functions.rules import RuleInfo
from fornace.conductor.dsl.pending import SEND_COMMAND, UPDATE_STACK
from fornace.conductor.dsl.querytext import QueryText
from fornace.conductor.dsl.workflows import root_problem
from fornace.conductor.dsl.xmlload import Node, parse_file
from fornace.conductor.limits import Limits
from fornace.conductor.templates import TemplateStore


@dataclass
class Findings:
    """What a check found: problems (the check fails) and warnings (it does not)."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


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


def check(paths: list[str | Path], data_dir: str | Path | None = None,
          limits: Limits | None = None) -> list[str]:
    """All problems found, as ``file:line: message`` lines (empty when clean)."""
    return inspect(paths, data_dir, limits).problems


def inspect(paths: list[str | Path], data_dir: str | Path | None = None,
            limits: Limits | None = None, builtin: bool = True) -> Findings:
    """Problems and warnings of workflow files (``file:line: [warning: ]message``).

    ``builtin=False``: templates are looked for in the catalog only, not also
    in the built-in one (a workflow package must hold the templates it names)."""
    files, problems = expand(paths)
    found = Findings(problems)
    stores: dict[Path, TemplateStore] = {}
    for path in files:
        errors: list[LocatedError] = []
        ignored: list[WorkflowError] = []
        try:
            root = parse_file(path, ignored)
        except LocatedError as exc:
            found.problems.append(str(exc))
            continue
        finally:
            found.warnings.extend(_warning(note) for note in ignored)
        problem = root_problem(root)
        if problem is not None:
            errors.append(problem)
        bind(root, errors)
        found.problems.extend(str(error) for error in errors)
        catalog = Path(data_dir) if data_dir else catalog_of(path)
        if catalog not in stores:
            stores[catalog] = (TemplateStore(catalog, limits=limits) if builtin else
                               TemplateStore(catalog, fallback=None, limits=limits))
        store = stores[catalog]
        found.problems.extend(_check_tree(root, store))
    return found


def _warning(note: LocatedError) -> str:
    return str(LocatedError(f"warning: {note.message}", note.file, note.line))


def _walk_calls(node: Node) -> Iterator[Node]:
    """Every call node (not content-only blocks such as <success> or map items)."""
    yield node
    spec = FUNCTIONS.get(node.tag)
    body_tags = spec.body_tags if spec else frozenset()
    for param in node.params.values():
        yield from _walk_content(param)
    for child in node.children:
        if "*" in body_tags or child.tag in body_tags:
            yield from _walk_content(child)
        else:
            yield from _walk_calls(child)


def _walk_content(node: Node) -> Iterator[Node]:
    for param in node.params.values():
        yield from _walk_content(param)
    for child in node.children:
        yield from _walk_calls(child)


def _check_tree(root: Node, store: TemplateStore) -> list[str]:
    problems = []
    for node in _walk_calls(root):
        spec = FUNCTIONS.get(node.tag)
        if spec is None:  # already reported as an unknown function
            continue
        for name, param in node.params.items():
            if name not in spec.params:
                problems.append(f"{param.where}: unknown parameter {name!r} of <{node.tag}>"
                                + (f" (known: {', '.join(sorted(spec.params))})"
                                   if spec.params else ""))
        if node.tag == "set" and {"path", "target"}.isdisjoint(node.params) \
                and "target" not in node.attrs:
            path = node.attrs.get("path") or ""
            if not path.startswith("#") and not split_prefix(path)[2]:
                problems.append(f"{node.where}: <set>: path {path!r} names no field to set")
        template = node.attrs.get("template")
        if template and "template" not in node.params:
            problems.extend(f"{node.where}: {message}"
                            for message in _template_problems(node.tag, template, store))
        text = node.extra.text if isinstance(node.extra, RuleInfo) else node.extra
        if isinstance(text, QueryText):
            try:
                text.sample()
            except LocatedError as exc:
                problems.append(f"{node.where}: {exc.message}")
    return problems


def _template_problems(tag: str, name: str, store: TemplateStore) -> list[str]:
    try:
        if tag == UPDATE_STACK:
            store.heat_template(name)
        elif tag == SEND_COMMAND:
            plan = store.agent_template(name)
            for script in plan.get("Scripts") or []:
                if isinstance(script, str) and not script.startswith("$"):
                    store.script(script)
    except LocatedError as exc:
        return [f"template {name!r}: {exc}"]
    return []
