"""Value builders: constants, ``text``, ``int``, ``list``, ``map``, ``function``."""
from __future__ import annotations

from typing import Any

from fornace.common.errors import WorkflowError, shortened
from fornace.common.jsonlimits import INT_MAX_DIGITS
from fornace.conductor.dsl.deferred import Deferred
from fornace.conductor.dsl.engine import Evaluator, function
from fornace.conductor.dsl.scope import Frame
from fornace.conductor.dsl.xmlload import Node


@function("true")
def true_(ev: Evaluator, node: Node, frame: Frame) -> bool:
    return True


@function("false")
def false_(ev: Evaluator, node: Node, frame: Frame) -> bool:
    return False


@function("null")
def null_(ev: Evaluator, node: Node, frame: Frame) -> None:
    return None


def as_text(value: Any) -> str:
    """``str()`` as Python shows it, the 0.2 behaviour (None → 'None')."""
    return value if isinstance(value, str) else str(value)


@function("text")
def text_(ev: Evaluator, node: Node, frame: Frame) -> str:
    return as_text(ev.content(node, frame))


@function("int")
def int_(ev: Evaluator, node: Node, frame: Frame) -> int:
    value = ev.content(node, frame)
    if isinstance(value, bool):
        return int(value)
    try:
        return int(value if isinstance(value, (int, float)) else as_text(value).strip())
    except ValueError:   # not digits, or more than Python reads (4300)
        raise WorkflowError(f"<int>: {shortened(repr(value), 100)} is not an integer "
                            f"(of at most {INT_MAX_DIGITS} digits)") from None


@function("list", body_tags=("*",))
def list_(ev: Evaluator, node: Node, frame: Frame) -> list:
    return [ev.content(item, frame) for item in node.children]


@function("map", body_tags=("*",))
def map_(ev: Evaluator, node: Node, frame: Frame) -> dict:
    result = {}
    for item in node.children:
        key = ev.arg(item, frame, "name")
        if key is None:
            raise WorkflowError(f"<{item.tag}> in <map> has no name", item.file, item.line)
        result[as_text(key)] = ev.content(item, frame)
    return result


@function("function")
def function_(ev: Evaluator, node: Node, frame: Frame) -> Deferred:
    ev.context.deferred_values = True  # from now on, set must look for them
    return Deferred(ev, node, frame)
