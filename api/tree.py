"""Tree traversal of the services list: ``/services/<id>/units/0/name``.

A segment selects a dict key, or in a list the item whose ``id`` equals the
segment, or else the item at that index.  Every function works on the value
it is given and raises :class:`~fornace.api.errors.NotFound` naming the segment that
does not exist.
"""
from __future__ import annotations

from typing import Any

from fornace.api.errors import BadRequest, NotFound


MAX_DEPTH = 64
"""Deepest nesting of lists and objects in a services list (the code that copies,
masks and serialises it recurses)."""


def depth(value: Any) -> int:
    """How deeply lists and objects nest in ``value`` (0 for a scalar), without recursion."""
    deepest = 0
    pending = [(value, 1)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, level + 1) for child in children)
    return deepest


def split(path: str) -> list[str]:
    return [part for part in path.strip("/").split("/") if part]


def _child_key(node: Any, segment: str, done: list[str]) -> Any:
    if isinstance(node, dict):
        if segment in node:
            return segment
    elif isinstance(node, list):
        for index, item in enumerate(node):
            if isinstance(item, dict) and item.get("id") == segment:
                return index
        if segment.isdigit() and int(segment) < len(node):
            return int(segment)
    where = "/".join(done) or "services"
    raise NotFound(f"{'/'.join(done + [segment])} not found (no {segment!r} in {where})")


def get(root: Any, segments: list[str]) -> Any:
    node = root
    for index, segment in enumerate(segments):
        node = node[_child_key(node, segment, segments[:index])]
    return node


def parent_and_key(root: Any, segments: list[str], create: bool = False) -> tuple[Any, Any]:
    """The container holding the last segment and the key in it."""
    if not segments:
        raise BadRequest("a path below /services is needed")
    parent = get(root, segments[:-1])
    last = segments[-1]
    if create and isinstance(parent, dict):
        return parent, last
    return parent, _child_key(parent, last, segments[:-1])


def put(root: Any, segments: list[str], value: Any) -> None:
    parent, key = parent_and_key(root, segments, create=True)
    if not isinstance(parent, (dict, list)):
        raise BadRequest(f"{'/'.join(segments[:-1])} is not an object or a list")
    parent[key] = value


def delete(root: Any, segments: list[str]) -> Any:
    parent, key = parent_and_key(root, segments)
    return parent.pop(key)


def top_service(root: list, segments: list[str]) -> dict | None:
    """The service a path lies in (None for the services list itself)."""
    return get(root, segments[:1]) if segments else None
