"""Reading and writing the object model: ``select*`` and ``set``.

Paths: ``a.b.0`` below the cursor, ``:`` prefixes for ancestors, ``/`` for
the model root, ``#name`` for a context variable (``#name.a.b`` drills into
it), ``##name`` for configuration (read-only); ``source=``/``target=`` read
and write inside a context variable instead of the model.
"""
from __future__ import annotations

from typing import Any

from ..cursor import Cursor, get_path, set_path, split_prefix, start_cursor
from ..engine import Evaluator, function
from ..errors import WorkflowError
from ..query import compile_query
from ..scope import Frame
from ..xmlload import Node
from .values import resolve


_SPECIAL = frozenset(":/#")


def _variable(frame: Frame | None, key: str) -> tuple[str, str]:
    """Split ``'::unit.name'`` into the variable key and the path inside it."""
    name, _, rest = key.partition(".")
    return name, rest


def read(ev: Evaluator, frame: Frame, path: str, source: str | None) -> Any:
    if source is None and (not path or path[0] not in _SPECIAL):  # the common case
        return get_path(frame.cursor.value, path)
    if path.startswith("##"):
        return ev.session.config_value(path[2:])
    if path.startswith("#"):
        name, rest = _variable(frame, path[1:])
        return get_path(frame.get(name), rest)
    if source is not None:
        return get_path(frame.get(source), path)
    cursor, rest = start_cursor(frame.cursor, path)
    return get_path(cursor.value, rest)


def _prepare_select(node: Node) -> None:
    """A ``<select>`` with constant attributes only reads: compile that read."""
    attrs = node.attrs
    if node.params or node.children or set(attrs) - {"path", "source", "default"}:
        return
    path, source, default = attrs.get("path") or "", attrs.get("source"), attrs.get("default")
    if source is not None:
        def find(frame: Frame) -> Any:
            return get_path(frame.get(source), path)
    elif path.startswith("##"):
        return  # configuration: read through the session
    elif path.startswith("#"):
        name, rest = _variable(frame=None, key=path[1:])

        def find(frame: Frame) -> Any:
            return get_path(frame.get(name), rest)
    else:
        kind, levels, rest = split_prefix(path)

        if kind == "root":
            def find(frame: Frame) -> Any:
                return get_path(frame.cursor.root().value, rest)
        elif levels:
            def find(frame: Frame) -> Any:
                return get_path(frame.cursor.up(levels).value, rest)
        else:
            def find(frame: Frame) -> Any:
                return get_path(frame.cursor.value, rest)

    if default is None:
        node.fast = find
    else:
        def find_or_default(frame: Frame) -> Any:
            value = find(frame)
            return value if value else default
        node.fast = find_or_default


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
    path = ev.arg(node, frame, "path") or ""
    if not path:
        return []
    source = ev.arg(node, frame, "source")
    start = Cursor(frame.get(source)) if source is not None else frame.cursor
    return ev.session.find(compile_query(path, wrap=False), start)


def _prepare_query(node: Node) -> None:
    """Compile a constant path at load time, so bad syntax shows up early."""
    path = node.attrs.get("path")
    if path and "path" not in node.params:
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
    if ev.session.deferred_values:  # only after a <function> was evaluated
        value = resolve(value)
    if path.startswith("##"):
        raise WorkflowError(f"<set>: configuration {path!r} is read-only")
    if path.startswith("#"):
        name, rest = _variable(frame, path[1:])
        if not rest:
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
    if set_path(cursor.value, rest, value):
        where = cursor.path_text()
        ev.session.changed(frame.rule_id, node, rest if where == "$" else f"{where}.{rest}",
                           value)


def _set_inside(ev: Evaluator, node: Node, frame: Frame, data: Any, name: str, path: str,
                value: Any) -> None:
    if data is None:
        raise WorkflowError(f"<set>: context variable {name!r} is not set")
    if not path:
        raise WorkflowError(f"<set>: a path is needed to set inside {name!r}")
    if set_path(data, path, value):
        ev.session.changed(frame.rule_id, node, f"#{name}.{path}", value)
