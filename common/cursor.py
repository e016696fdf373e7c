"""Cursors into the object model and the dotted paths of ``select``/``set``.

A :class:`Cursor` is a position in the model: the value there, the key that
led to it and the parent cursor.  Keeping the chain (rather than a path string
re-resolved from the root on each access) makes ``:`` (parent) free and lets
rule callbacks run later at the position they were queued from.

Dotted paths (``a.b.0.c``) read ``None`` where anything is missing; ``set``
creates missing dictionaries on the way.
"""
from __future__ import annotations

from typing import Any, Hashable


class Cursor:
    __slots__ = ("value", "key", "parent")

    def __init__(self, value: Any, key: Hashable = None,
                 parent: "Cursor | None" = None) -> None:
        self.value = value
        self.key = key
        self.parent = parent

    def up(self, levels: int) -> "Cursor":
        cursor = self
        for _ in range(levels):
            if cursor.parent is None:
                break
            cursor = cursor.parent
        return cursor

    def root(self) -> "Cursor":
        cursor = self
        while cursor.parent is not None:
            cursor = cursor.parent
        return cursor

    def path(self) -> list[Hashable]:
        """Keys from the root to here, e.g. ``['services', 0, 'units', 1]``."""
        keys = []
        cursor = self
        while cursor.parent is not None:
            keys.append(cursor.key)
            cursor = cursor.parent
        keys.reverse()
        return keys

    def path_text(self) -> str:
        return ".".join(str(k) for k in self.path()) or "$"

    @property
    def object_id(self) -> Any:
        value = self.value
        return value.get("id") if isinstance(value, dict) else None


def unit_cursors(model: dict[str, Any]) -> list[Cursor]:
    """The cursor of every unit of the model (root -> services -> i -> units -> j),
    in model order."""
    root = Cursor(model)
    services = model.get("services")
    found: list[Cursor] = []
    if not isinstance(services, list):
        return found
    for i, service in enumerate(services):
        units = service.get("units") if isinstance(service, dict) else None
        if isinstance(units, list):
            above = Cursor(units, "units", Cursor(service, i, Cursor(services, "services", root)))
            found += [Cursor(unit, j, above) for j, unit in enumerate(units)
                      if isinstance(unit, dict)]
    return found


def split_prefix(path: str) -> tuple[str, int, str]:
    """Split ``'::a.b'`` into (``'up'``, 2, ``'a.b'``), ``'/a'`` into (``'root'``, 0, ``'a'``)."""
    if path.startswith("/"):
        return "root", 0, path[1:]
    levels = len(path) - len(path.lstrip(":"))
    return "up", levels, path[levels:]


def start_cursor(cursor: Cursor, path: str) -> tuple[Cursor, str]:
    """Apply a path's ``/`` or ``:`` prefix to a cursor; return the rest."""
    kind, levels, rest = split_prefix(path)
    if kind == "root":
        return cursor.root(), rest
    return (cursor.up(levels) if levels else cursor), rest


def get_path(value: Any, path: str) -> Any:
    """Read a dotted path below ``value``; anything missing gives None."""
    if not path:
        return value
    for part in path.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list):
            try:
                value = value[int(part)]
            except (ValueError, IndexError):
                return None
        else:
            return None
        if value is None:
            return None
    return value


def set_path(value: Any, path: str, new: Any) -> bool:
    """Write ``new`` at a dotted path, creating dicts; True if it changed."""
    parts = path.split(".")
    for index, part in enumerate(parts[:-1]):
        value = _step_for_write(value, part, parts[: index + 1])
    last = parts[-1]
    if isinstance(value, dict):
        if last in value and value[last] == new and type(value[last]) is type(new):
            return False
        value[last] = new
        return True
    if isinstance(value, list):
        index = _list_index(value, last, parts)
        if value[index] == new and type(value[index]) is type(new):
            return False
        value[index] = new
        return True
    raise ValueError(f"cannot set {path!r}: {'.'.join(parts[:-1]) or 'target'} "
                     f"is a {type(value).__name__}, not an object")


def _step_for_write(value: Any, part: str, done: list[str]) -> Any:
    if isinstance(value, dict):
        child = value.get(part)
        if child is None:
            child = value[part] = {}
        return child
    if isinstance(value, list):
        return value[_list_index(value, part, done)]
    raise ValueError(f"cannot set below {'.'.join(done[:-1]) or 'target'!r}: "
                     f"it is a {type(value).__name__}, not an object")


def _list_index(value: list, part: str, done: list[str]) -> int:
    try:
        index = int(part)
        value[index]
    except (ValueError, IndexError):
        raise ValueError(f"cannot set {'.'.join(done)!r}: no list item {part!r}") from None
    return index
