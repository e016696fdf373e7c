"""``fornace workflow check``: find problems in workflow files before a deployment does.

The caller hands in a file's text and the :class:`Templates` its names are
looked up in, so the check reads no file and knows no catalog layout or
limits of its own (:mod:`fornace.conductor.workflowcheck` runs it over the
files and folders named, with each catalog's templates).

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
from typing import Iterator

from fornace.common.cursor import split_prefix
from fornace.common.errors import LocatedError, WorkflowError
from fornace.conductor.dsl import functions as dsl  # noqa: F401  (registers the DSL functions)
from fornace.conductor.dsl.context import Templates
from fornace.conductor.dsl.engine import FUNCTIONS, bind
from fornace.conductor.dsl.functions.rules import RuleInfo
from fornace.conductor.dsl.pending import SEND_COMMAND, UPDATE_STACK
from fornace.conductor.dsl.querytext import QueryText
from fornace.conductor.dsl.workflows import root_problem
from fornace.conductor.dsl.xmlload import Node, parse_bytes


@dataclass
class Findings:
    """What a check found: problems (the check fails) and warnings (it does not)."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def check_source(data: bytes, file: str, templates: Templates) -> Findings:
    """Problems and warnings (``file:line: [warning: ]message``) of one workflow
    file whose XML is ``data``; the templates it names are looked up in
    ``templates``."""
    found = Findings()
    errors: list[LocatedError] = []
    ignored: list[WorkflowError] = []
    try:
        root = parse_bytes(data, file, ignored)
    except LocatedError as exc:
        found.problems.append(str(exc))
        return found
    finally:
        found.warnings.extend(_warning(note) for note in ignored)
    problem = root_problem(root)
    if problem is not None:
        errors.append(problem)
    bind(root, errors)
    found.problems.extend(str(error) for error in errors)
    found.problems.extend(_check_tree(root, templates))
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


def _check_tree(root: Node, store: Templates) -> list[str]:
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


def _template_problems(tag: str, name: str, store: Templates) -> list[str]:
    """What is wrong with a template a call names: the template itself, else each
    script of its plan that cannot be had (all of them, not only the first)."""
    problems = []
    try:
        if tag == UPDATE_STACK:
            store.heat_template(name)
        elif tag == SEND_COMMAND:
            plan = store.agent_template(name)
            for script in plan.get("Scripts") or []:
                if isinstance(script, str) and not script.startswith("$"):
                    try:
                        store.script(script)
                    except LocatedError as exc:
                        problems.append(f"template {name!r}: {exc}")
    except LocatedError as exc:
        return [f"template {name!r}: {exc}"]
    return problems
