"""Actions and reports: ``update-cf-stack``, ``delete-cf-stack``,
``send-command`` and ``report``.

Actions are only queued here; the deployment runs them after the fixpoint and
then calls back into the ``<success>``/``<failure>`` block, with the result
or error stored in the context variable named by ``result=``/``error=``.
"""
from __future__ import annotations

from typing import Any

from fornace.common.errors import WorkflowError
from fornace.conductor.dsl.engine import Evaluator, function
from fornace.conductor.dsl.functions.values import as_text
from fornace.conductor.dsl.pending import DELETE_STACK, SEND_COMMAND, UPDATE_STACK, Action
from fornace.conductor.dsl.scope import Frame
from fornace.conductor.dsl.xmlload import Node

_CALLBACKS = ("success", "failure")


def _dict_arg(ev: Evaluator, node: Node, frame: Frame, name: str) -> dict:
    value = ev.arg(node, frame, name)
    if value is None or value == "":
        return {}
    if not isinstance(value, dict):
        raise WorkflowError(f"<{node.tag}>: {name} must be a <map>, got {type(value).__name__}")
    return value


class Blocks:
    """Runs the ``<success>``/``<failure>`` block of an action element later,
    in the frame it was queued from (one small object, not closures: a big
    deployment keeps thousands of them alive)."""

    __slots__ = ("ev", "node", "frame", "result_var", "error_var")

    def __init__(self, ev: Evaluator, node: Node, frame: Frame) -> None:
        self.ev, self.node, self.frame = ev, node, frame
        self.result_var = ev.arg(node, frame, "result")
        self.error_var = ev.arg(node, frame, "error")

    def run(self, succeeded: bool, value: Any) -> None:
        var = self.result_var if succeeded else self.error_var
        if var:
            self.frame.set(var, value)
        block = self.node.child("success" if succeeded else "failure")
        if block is not None:
            self.ev.content(block, self.frame)


def _queue(ev: Evaluator, node: Node, frame: Frame, kind: str, **fields: Any) -> None:
    action = Action(kind=kind, where=node.where, rule_id=frame.rule_id,
                    blocks=Blocks(ev, node, frame), **fields)
    ev.context.queue(action)


def _template(ev: Evaluator, node: Node, frame: Frame) -> str:
    template = ev.arg(node, frame, "template")
    if not isinstance(template, str) or not template.strip():
        raise WorkflowError(f"<{node.tag}> needs a template name")
    return template.strip()


@function(UPDATE_STACK, params=("template", "mappings", "arguments", "result", "error"),
          body_tags=_CALLBACKS)
def update_cf_stack(ev: Evaluator, node: Node, frame: Frame) -> None:
    _queue(ev, node, frame, UPDATE_STACK, template=_template(ev, node, frame),
           mappings=_dict_arg(ev, node, frame, "mappings"),
           arguments=_dict_arg(ev, node, frame, "arguments"))


@function(DELETE_STACK, params=("result", "error"), body_tags=_CALLBACKS)
def delete_cf_stack(ev: Evaluator, node: Node, frame: Frame) -> None:
    _queue(ev, node, frame, DELETE_STACK)


@function(SEND_COMMAND, params=("template", "service", "unit", "mappings", "result",
                                "error", "timeout"), body_tags=_CALLBACKS)
def send_command(ev: Evaluator, node: Node, frame: Frame) -> None:
    service = ev.arg(node, frame, "service")
    unit = ev.arg(node, frame, "unit")
    if not service or not unit:
        raise WorkflowError("<send-command> needs service and unit ids")
    timeout = ev.arg(node, frame, "timeout")
    try:
        seconds = float(timeout) if timeout not in (None, "") else None
    except (TypeError, ValueError):
        raise WorkflowError(f"<send-command>: timeout {timeout!r} is not a number") from None
    _queue(ev, node, frame, SEND_COMMAND, template=_template(ev, node, frame),
           service=as_text(service), unit=as_text(unit),
           mappings=_dict_arg(ev, node, frame, "mappings"),
           timeout=seconds if seconds is not None else ev.context.agent_timeout)


@function("report", params=("entity", "id", "text", "level", "details"))
def report(ev: Evaluator, node: Node, frame: Frame) -> None:
    text = ev.arg(node, frame, "text")
    if text is None:
        text = ev.content(node, frame)
    level = ev.arg(node, frame, "level") or "info"
    if level not in ("info", "warning", "error"):
        raise WorkflowError(f"<report>: level {level!r} is not info, warning or error")
    entity = ev.arg(node, frame, "entity")
    ev.context.report(entity=entity, id=ev.arg(node, frame, "id"),
                      text=as_text(text) if text is not None else "",
                      level=level, details=ev.arg(node, frame, "details"))
