"""Deferred values: what ``<function>`` returns, a body evaluated when needed.

Actions resolve deferred mappings when they run (:func:`detached`), so a
mapping can read the model as it is then rather than when the action was
queued; ``<set>`` writes them resolved (:func:`resolve`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from fornace.conductor.dsl.engine import Evaluator
    from fornace.conductor.dsl.scope import Frame
    from fornace.conductor.dsl.xmlload import Node


class Deferred:
    """The value of ``<function>``: its body, evaluated when it is needed.

    Actions resolve deferred mappings when they run, so a mapping can read
    the model as it is then rather than when the action was queued.
    """

    __slots__ = ("ev", "node", "frame")

    def __init__(self, ev: Evaluator, node: Node, frame: Frame) -> None:
        self.ev, self.node, self.frame = ev, node, frame

    def __call__(self) -> Any:
        return self.ev.content(self.node, self.frame)


def resolve(value: Any) -> Any:
    """Evaluate any :class:`Deferred` inside a value (dicts and lists too).

    A dict or list without a deferred value inside is returned itself, not a
    copy: ``<set path="#x"><select/></set>`` keeps a reference to that part
    of the model, so ``<set target="x">`` edits the model (0.2).
    """
    if isinstance(value, Deferred):
        return resolve(value())
    if isinstance(value, dict):
        resolved = {k: resolve(v) for k, v in value.items()}
        return value if all(resolved[k] is v for k, v in value.items()) else resolved
    if isinstance(value, list):
        items = [resolve(v) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else items
    return value


def detached(value: Any) -> Any:
    """A copy of a JSON-like value with deferred values evaluated.

    Action mappings go through this: the Heat merge edits templates in place
    and must never reach model objects through a mapping.
    """
    if isinstance(value, Deferred):
        return detached(value())
    if isinstance(value, dict):
        return {k: detached(v) for k, v in value.items()}
    if isinstance(value, list):
        return [detached(v) for v in value]
    return value
