"""Evaluation of the XML DSL: each element is a call of a registered function.

Attributes are string arguments, ``<parameter name=…>`` children are
evaluated arguments, and the rest of the body is handed to the function,
which decides what to evaluate (``<success>`` blocks run later, ``<rule>``
bodies once per match).  Evaluated *content* follows Murano 0.2: text and
child results that are all strings are joined (and stripped when there were
child elements); one non-string result (``None`` included) is returned as is;
several non-strings make a list.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from fornace.common.errors import LocatedError, WorkflowError
from fornace.conductor.dsl.scope import Frame
from fornace.conductor.dsl.xmlload import Node

if TYPE_CHECKING:  # pragma: no cover
    from fornace.conductor.dsl.context import EvaluationContext

Function = Callable[["Evaluator", Node, Frame], Any]


@dataclass(frozen=True)
class FunctionSpec:
    """A DSL function, the arguments it knows and the body tags it reads."""

    impl: Function
    params: frozenset[str]
    body_tags: frozenset[str] = frozenset()
    prepare: Callable[[Node], None] | None = None  # load-time checks/compilation


FUNCTIONS: dict[str, FunctionSpec] = {}

# Tags that are never calls: they are read by their parent function.
STRUCTURAL = frozenset({"parameter"})


def function(name: str, params: tuple[str, ...] = (), body_tags: tuple[str, ...] = (),
             prepare: Callable[[Node], None] | None = None) -> Callable[[Function], Function]:
    """Register ``impl`` as the DSL function ``name``."""
    def register(impl: Function) -> Function:
        FUNCTIONS[name] = FunctionSpec(impl, frozenset(params), frozenset(body_tags), prepare)
        return impl
    return register


class Evaluator:
    """Evaluates nodes for one deployment, whose ``context`` the functions use."""

    __slots__ = ("context",)

    def __init__(self, context: EvaluationContext) -> None:
        self.context = context

    def call(self, node: Node, caller: Frame) -> Any:
        """Call the function of ``node`` in a new frame below ``caller``.

        A node with a ``fast`` reader (a plain ``<select>``, compiled at load
        time) is read directly: it would only read through that frame.
        """
        fast = node.fast
        if fast is not None:
            return fast(caller)
        try:
            return node.func(self, node, Frame(caller))
        except LocatedError as exc:
            raise exc.located(node.file, node.line)
        except RecursionError:
            raise WorkflowError(f"<{node.tag}>: nesting too deep", node.file, node.line) from None
        except Exception as exc:  # a bug or bad data inside one rule
            raise WorkflowError(f"<{node.tag}>: {type(exc).__name__}: {exc}",
                                node.file, node.line) from exc

    def content(self, node: Node, frame: Frame) -> Any:
        """Evaluate the body of ``node`` (text and child calls) in ``frame``."""
        fast = node.fast_content
        if fast is not None:
            return fast(frame)
        children = node.children
        if not children:
            return node.text
        if node.blank and len(children) == 1:
            value = self.call(children[0], frame)
            return value.strip() if isinstance(value, str) else value
        strings = [node.text]
        others = []
        for child, tail in zip(children, node.tails):
            value = self.call(child, frame)
            if isinstance(value, str):
                strings.append(value)
            else:
                others.append(value)
            strings.append(tail)
        if not others:
            return "".join(strings).strip()
        if len(others) == 1:
            return others[0]
        return others

    def arg(self, node: Node, frame: Frame, name: str, default: Any = None) -> Any:
        """An argument: the evaluated ``<parameter>`` if any, else the attribute."""
        param = node.params.get(name)
        if param is not None:
            return self.content(param, frame)
        return node.attrs.get(name, default)

    def has_arg(self, node: Node, name: str) -> bool:
        return name in node.params or name in node.attrs


def bind(node: Node, errors: list[LocatedError] | None = None) -> None:
    """Resolve the function of every call node below ``node`` (load time).

    With ``errors`` given, problems are collected there and binding goes on
    (``fornace workflow check`` reports them all); otherwise the first raises.
    """
    spec = FUNCTIONS.get(node.tag)
    if spec is None:
        _fail(WorkflowError(f"unknown function <{node.tag}>", node.file, node.line), errors)
        return
    node.func = spec.impl
    if spec.prepare is not None:
        try:
            spec.prepare(node)
        except LocatedError as exc:
            _fail(exc.located(node.file, node.line), errors)
    for param in node.params.values():
        bind_content(param, errors)
    for child in node.children:
        if "*" in spec.body_tags or child.tag in spec.body_tags:
            bind_content(child, errors)
        else:
            bind(child, errors)
    _compile_content(node)


def bind_content(node: Node, errors: list[LocatedError] | None = None) -> None:
    """Bind the calls inside a content-only element (parameter, item, success…)."""
    for param in node.params.values():
        bind_content(param, errors)
    for child in node.children:
        bind(child, errors)
    _compile_content(node)


def _compile_content(node: Node) -> None:
    """An element whose content is one fast call (``<set><select/></set>``)
    gets that call as its content, without the general content loop."""
    if node.blank and len(node.children) == 1 and node.children[0].fast is not None:
        node.fast_content = _stripped(node.children[0].fast)


def _stripped(read: Callable[[Frame], Any]) -> Callable[[Frame], Any]:
    """The content of an element holding one fast call: its value (strings stripped)."""
    def content(frame: Frame) -> Any:
        value = read(frame)
        return value.strip() if isinstance(value, str) else value
    return content


def _fail(error: LocatedError, errors: list[LocatedError] | None) -> None:
    if errors is None:
        raise error
    errors.append(error)
