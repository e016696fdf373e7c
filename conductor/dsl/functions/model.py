"""Reading and writing the object model: ``select*`` and ``set``.

Paths: ``a.b.0`` below the cursor, ``:`` prefixes for ancestors, ``/`` for
the model root, ``#name`` for a context variable (``#name.a.b`` drills into
it), ``##name`` for configuration (read-only); ``source=``/``target=`` read
and write inside a context variable instead of the model.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from fornace.common.cursor import Cursor, get_path, set_path, split_prefix, start_cursor
from fornace.common.errors import WorkflowError
from fornace.conductor.dsl.deferred import resolve
from fornace.conductor.dsl.engine import Evaluator, function
from fornace.conductor.dsl.query import Query, compile_query
from fornace.conductor.dsl.querytext import evaluate, query_text
from fornace.conductor.dsl.scope import Frame
from fornace.conductor.dsl.xmlload import Node


Reader = Callable[[Frame], Any]


def _variable(key: str) -> tuple[str, str]:
    """Split ``'::unit.name'`` into the variable key and the path inside it."""
    name, _, rest = key.partition(".")
    return name, rest


@functools.lru_cache(maxsize=4096)
def reader(path: str, source: str | None) -> Reader | None:
    """How ``select`` reads ``path`` (inside context variable ``source``) in a frame.

    None for ``##name``: configuration, which the context answers.
    """
    if path.startswith("##"):
        return None
    if path.startswith("#"):
        name, rest = _variable(path[1:])
        return lambda frame: get_path(frame.get(name), rest)
    if source is not None:
        return lambda frame: get_path(frame.get(source), path)
    kind, levels, rest = split_prefix(path)
    if kind == "root":
        return lambda frame: get_path(frame.cursor.root().value, rest)
    if levels:
        return lambda frame: get_path(frame.cursor.up(levels).value, rest)
    return lambda frame: get_path(frame.cursor.value, rest)


def read(ev: Evaluator, frame: Frame, path: str, source: str | None) -> Any:
    read_in = reader(path, source)
    return ev.context.config_value(path[2:]) if read_in is None else read_in(frame)


def _prepare_select(node: Node) -> None:
    """A ``<select>`` with constant attributes only reads: that read is its call."""
    attrs = node.attrs
    if node.params or node.children or set(attrs) - {"path", "source", "default"}:
        return
    read_in = reader(attrs.get("path") or "", attrs.get("source"))
    default = attrs.get("default")
    if read_in is None:
        return
    if default is None:
        node.fast = read_in
        return

    def read_or_default(frame: Frame) -> Any:
        return read_in(frame) or default
    node.fast = read_or_default


@function("select", params=("path", "source", "default"), prepare=_prepare_select)
def select(ev: Evaluator, node: Node, frame: Frame) -> Any:
    value = read(ev, frame, ev.arg(node, frame, "path") or "",
                 ev.arg(node, frame, "source"))
    if not value:
        default = ev.arg(node, frame, "default")
        if default is not None:
            return default
    return value


def _query(ev: Evaluator, node: Node, frame: Frame) -> list[Cursor]:
    text = node.extra
    path = ev.arg(node, frame, "path") if text is None else evaluate(ev, frame, text)
    if not path:
        return []
    if not isinstance(path, (str, Query)):
        raise WorkflowError(f"<{node.tag}>: path evaluated to {path!r}, not text")
    source = ev.arg(node, frame, "source")
    start = Cursor(frame.get(source)) if source is not None else frame.cursor
    query = path if isinstance(path, Query) else compile_query(path, wrap=False)
    return ev.context.find(query, start)


def _prepare_query(node: Node) -> None:
    """Compile a constant path at load time, so bad syntax shows up early; a path
    parameter of text and calls is kept as such (its values are bound as data)."""
    path = node.attrs.get("path")
    if "path" in node.params:
        node.extra = query_text(node.params["path"], wrap=False)
    elif path:
        compile_query(path, wrap=False)


@function("select-all", params=("path", "source", "limit"), prepare=_prepare_query)
def select_all(ev: Evaluator, node: Node, frame: Frame) -> list:
    found = [c.value for c in _query(ev, node, frame)]
    limit = int(ev.arg(node, frame, "limit") or 0)
    return found[:limit] if limit > 0 else found


@function("select-single", params=("path", "source"), prepare=_prepare_query)
def select_single(ev: Evaluator, node: Node, frame: Frame) -> Any:
    found = _query(ev, node, frame)
    return found[0].value if found else None


@function("set", params=("path", "target"))
def set_(ev: Evaluator, node: Node, frame: Frame) -> None:
    path = ev.arg(node, frame, "path") or ""
    target = ev.arg(node, frame, "target")
    value = ev.content(node, frame)
    if ev.context.deferred_values:  # only after a <function> was evaluated
        value = resolve(value)
    if path.startswith("##"):
        raise WorkflowError(f"<set>: configuration {path!r} is read-only")
    if path.startswith("#"):
        name, rest = _variable(path[1:])
        if not rest:
            if type(value) is str:   # a string held in a context variable is memory too
                ev.context.admit(frame.rule_id, value, 0, (), lambda: path)
            frame.set(":" + name, value)
            return
        _set_inside(ev, node, frame, frame.get(":" + name), name, rest, value)
        return
    if target is not None:
        _set_inside(ev, node, frame, frame.get(target), target, path, value)
        return
    cursor, rest = start_cursor(frame.cursor, path)
    if not rest:
        raise WorkflowError(f"<set>: path {path!r} names no field to set")
    context = ev.context
    kind = type(value)
    if kind is dict or kind is list:
        parts = rest.split(".")
        above = _chain(cursor)
        size = context.admit(frame.rule_id, value, len(above) - 1 + len(parts),
                             _places(cursor.value, parts, above),
                             lambda: _joined(cursor.path_text(), rest))
    elif kind is not str:   # the common cases, inline
        size = 8
    elif len(value) < context.long_string:
        size = len(value) + 2
    else:
        size = context.admit(frame.rule_id, value, 0, (),
                             lambda: _joined(cursor.path_text(), rest))
    if set_path(cursor.value, rest, value):
        context.changed(frame.rule_id, node, _joined(cursor.path_text(), rest), value, size)


def _joined(where: str, rest: str) -> str:
    return rest if where == "$" else f"{where}.{rest}"


def _chain(cursor: Cursor) -> list[Any]:
    """The values from ``cursor`` up to the model root."""
    values = []
    while cursor is not None:
        values.append(cursor.value)
        cursor = cursor.parent
    return values


def _places(start: Any, parts: list[str], above: list[Any] = ()) -> set[int]:
    """The ids of the containers a value written at ``parts`` below ``start`` would
    sit in (``above`` too): it must not hold any of them."""
    ids = {id(value) for value in above}
    ids.add(id(start))
    value = start
    for part in parts[:-1]:
        value = get_path(value, part)
        if type(value) is not dict and type(value) is not list:
            break
        ids.add(id(value))
    return ids


def _set_inside(ev: Evaluator, node: Node, frame: Frame, data: Any, name: str, path: str,
                value: Any) -> None:
    if data is None:
        raise WorkflowError(f"<set>: context variable {name!r} is not set")
    if not path:
        raise WorkflowError(f"<set>: a path is needed to set inside {name!r}")
    parts = path.split(".")
    container = type(value) is dict or type(value) is list
    size = ev.context.admit(frame.rule_id, value, len(parts),
                            _places(data, parts) if container else (),
                            lambda: f"#{name}.{path}")
    # where ``data`` sits in the model is not known: a write that may nest the model
    # deeper has the budget measure it after this pass (known_depth=False)
    deeper = container or not _containers_exist(data, parts[:-1])
    if set_path(data, path, value):
        ev.context.changed(frame.rule_id, node, f"#{name}.{path}", value, size,
                           known_depth=not deeper, base=data)


def _containers_exist(data: Any, parts: list[str]) -> bool:
    for part in parts:
        data = get_path(data, part)
        if type(data) is not dict and type(data) is not list:
            return False
    return True
