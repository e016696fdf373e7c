"""CloudFormation stack templates as the executors change them: the deep merge
of a round's template into a stack's, and removing resources (and the outputs
that use them) from one.

The executors own this (every backend merges and removes the same way); the
round (:mod:`fornace.conductor.dispatch`) uses :func:`merge` to join the
fragments of a round's ``update-cf-stack`` actions.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Iterable

from fornace.conductor.executors.base import StackFailure


def merge(base: Any, update: Any) -> Any:
    """Deep-merge ``update`` into ``base`` (in place for dicts) and return it.

    Dicts merge key by key, lists keep the items of ``base`` and add those of
    ``update`` not already there, anything else is replaced.
    """
    if isinstance(base, dict) and isinstance(update, dict):
        for key, value in update.items():
            base[key] = merge(base[key], value) if key in base else value
        return base
    if isinstance(base, list) and isinstance(update, list):
        for item in update:
            if item not in base:
                base.append(item)
        return base
    return update


# -- removing resources ---------------------------------------------------------------
# Intrinsic functions whose argument names a resource, in CFN and HOT spelling.
NAME_REFERENCES = frozenset({"Ref", "get_resource"})
ATTRIBUTE_REFERENCES = frozenset({"Fn::GetAtt", "get_attr"})
DEPENDENCY_KEYS = ("DependsOn", "depends_on")


@dataclass(frozen=True)
class Removal:
    """What :func:`remove_resources` decided; the executors only carry it out."""

    template: dict[str, Any]         # the template left (a new copy)
    resources: tuple[str, ...]       # resources removed, in template order
    outputs: tuple[str, ...]         # outputs dropped because they used one of them

    @property
    def changed(self) -> bool:
        return bool(self.resources)

    @property
    def empty(self) -> bool:
        """Something was removed and no resource is left: the stack should go."""
        return self.changed and not _section(self.template, "Resources", "resources")


def remove_resources(template: dict[str, Any], names: Iterable[str],
                     stack_name: str = "") -> Removal:
    """The template without the named resources and the outputs that use them.

    Scale-in, heal and uninstall drop some units' instances while the rest of
    the stack stays, so this is the one place (shared by every executor) that
    knows what else must go with a resource.  Names the template does not
    have are ignored.  A remaining resource that still refers to a removed one
    (``Ref``, ``Fn::GetAtt``, ``get_resource``, ``get_attr``, ``DependsOn`` /
    ``depends_on``) is a :class:`StackFailure` naming both: dropping it too
    would remove more than was asked, keeping it would break the update.
    ``template`` itself is not changed.
    """
    left = copy.deepcopy(template)
    resources_key = _section_key(left, "Resources", "resources")
    resources = left.get(resources_key) if resources_key else None
    if not isinstance(resources, dict):
        return Removal(left, (), ())
    wanted = set(names)
    removed = tuple(name for name in resources if name in wanted)
    if not removed:
        return Removal(left, (), ())
    for name in removed:
        del resources[name]
    gone = set(removed)
    conflicts = [f"resource {user!r} refers to {target!r}"
                 for user, body in resources.items()
                 for target in sorted(resource_references(body) & gone)]
    if conflicts:
        where = f"stack {stack_name}: " if stack_name else ""
        raise StackFailure(
            f"{where}cannot remove {', '.join(map(repr, removed))}: "
            + "; ".join(conflicts) + " (remove it too, or change it first)",
            "removed resource still referenced")
    outputs_key = _section_key(left, "Outputs", "outputs")
    outputs = left.get(outputs_key) if outputs_key else None
    dropped: tuple[str, ...] = ()
    if isinstance(outputs, dict):
        dropped = tuple(key for key, spec in outputs.items() if references(spec) & gone)
        for key in dropped:
            del outputs[key]
    return Removal(left, removed, dropped)


def resource_references(resource: Any) -> set[str]:
    """Resource names a resource definition uses: its dependencies and intrinsics."""
    found = references(resource)
    if isinstance(resource, dict):
        for key in DEPENDENCY_KEYS:
            depends = resource.get(key)
            if isinstance(depends, str):
                found.add(depends)
            elif isinstance(depends, list):
                found.update(d for d in depends if isinstance(d, str))
    return found


def references(value: Any) -> set[str]:
    """Resource names ``value`` refers to through Ref/GetAtt-like functions.

    ``Ref`` also names parameters; callers intersect with resource names.
    """
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            for key, arg in item.items():
                target = _reference_target(key, arg)
                if target is not None:
                    found.add(target)
                stack.append(arg)
    return found


def _reference_target(key: str, arg: Any) -> str | None:
    if key in NAME_REFERENCES and isinstance(arg, str):
        return arg
    if key in ATTRIBUTE_REFERENCES:
        if isinstance(arg, list) and arg and isinstance(arg[0], str):
            return arg[0]
        if isinstance(arg, str) and "." in arg:   # the "name.Attribute" short form
            return arg.split(".", 1)[0]
    return None


def _section_key(template: dict[str, Any], *keys: str) -> str | None:
    """Which spelling (CFN or HOT) of a top-level section the template uses."""
    return next((key for key in keys if key in template), None)


def _section(template: dict[str, Any], *keys: str) -> Any:
    key = _section_key(template, *keys)
    return template.get(key) if key else None
