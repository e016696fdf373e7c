"""Function contexts: the nested scopes of the workflow DSL.

Every DSL call gets its own :class:`Frame` whose parent is the caller's.
A variable lookup falls back to the parents; a key may start with ``:``
(one level up per colon) or ``/`` (the outermost frame), which is how
``<set path="#x">`` publishes ``x`` to the *caller* (key ``:x``).

A frame also carries the model cursor, the id chain of the enclosing rule
and the mute key of the object the enclosing rule matched (None outside any
match, :data:`UNMUTABLE` for an object that cannot be muted), copied from the
parent at creation so reading them costs nothing.
"""
from __future__ import annotations

from typing import Any

from fornace.common.cursor import Cursor

#: The mute key of objects that are never muted (no ``id``, or found under
#: such an object): ``#``, as Murano 0.2 wrote it.
UNMUTABLE = "#"


class Frame:
    __slots__ = ("parent", "vars", "cursor", "rule_id", "object_key")

    def __init__(self, parent: "Frame | None" = None,
                 cursor: Cursor | None = None) -> None:
        self.parent = parent
        self.vars: dict[str, Any] | None = None
        if parent is not None:
            self.cursor = cursor or parent.cursor
            self.rule_id = parent.rule_id
            self.object_key = parent.object_key
        else:
            self.cursor = cursor
            self.rule_id = ""
            self.object_key = None

    def _resolve(self, key: str) -> tuple["Frame", str]:
        frame = self
        index = 0
        for char in key:
            if char == ":":
                if frame.parent is not None:
                    frame = frame.parent
            elif char == "/":
                while frame.parent is not None:
                    frame = frame.parent
            else:
                break
            index += 1
        return frame, key[index:]

    def get(self, key: str) -> Any:
        frame, name = self._resolve(key)
        while frame is not None:
            if frame.vars is not None and name in frame.vars:
                return frame.vars[name]
            frame = frame.parent
        return None

    def set(self, key: str, value: Any) -> None:
        frame, name = self._resolve(key)
        if frame.vars is None:
            frame.vars = {}
        frame.vars[name] = value
