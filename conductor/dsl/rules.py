"""Control flow: ``workflow``, ``rule`` (with ``<empty>``), ``mute``,
``unmute`` and ``stop``.

Muting (Murano 0.2): each object a rule matches is muted for that rule until
the pending actions run, so a pass never handles the same object twice; an
object without an ``id`` cannot be muted and matches on every pass.
``<mute/>`` places a mute that lasts for the whole deployment.  Mutes are
keyed by (workflow file, rule id, object id); nested rule ids are joined by
dots (``outer.inner``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..engine import Evaluator, function
from ..errors import WorkflowError
from ..query import Query, compile_query
from ..scope import Frame
from ..xmlload import Node


@function("workflow")
def workflow(ev: Evaluator, node: Node, frame: Frame) -> bool:
    """Run the rules once; return early after a rule that changed the model."""
    session = ev.session
    session.side_effects = False
    for child in node.children:
        ev.call(child, frame)
        if session.stop_requested:
            break
        if child.tag == "rule" and session.side_effects:
            return True
    return session.side_effects


@dataclass(frozen=True)
class RuleInfo:
    id: str
    query: Query | None  # None when the match is a <parameter>


def _prepare_rule(node: Node) -> None:
    query = None
    if "match" in node.params:
        pass
    elif "match" in node.attrs:
        query = compile_query(node.attrs["match"])
    else:
        raise WorkflowError("<rule> needs a match (attribute or <parameter>)")
    rule_id = node.attrs.get("id") or f"line{node.line}"
    if "." in rule_id:
        raise WorkflowError(f"<rule> id {rule_id!r} must not contain '.'")
    node.extra = RuleInfo(rule_id, query)


@function("rule", params=("match", "desc", "id", "limit"), body_tags=("empty",),
          prepare=_prepare_rule)
def rule(ev: Evaluator, node: Node, frame: Frame) -> None:
    info: RuleInfo = node.extra
    session = ev.session
    full_id = f"{frame.rule_id}.{info.id}" if frame.rule_id else info.id
    frame.rule_id = full_id
    query = info.query
    if query is None:
        match = ev.arg(node, frame, "match")
        if not isinstance(match, str) or not match.strip():
            raise WorkflowError(f"<rule>: match parameter evaluated to {match!r}")
        query = compile_query(match)
    limit = int(ev.arg(node, frame, "limit") or 0)
    matches = session.find(query, frame.cursor)
    if not matches:
        _run_empty(ev, node, frame, full_id)
        return
    file = node.file
    for index, cursor in enumerate(matches):
        if 0 < limit <= index:
            break
        object_id = cursor.object_id
        if object_id is not None:
            key = (file, full_id, _hashable(object_id))
            if session.is_muted(key):
                continue
            session.auto_mutes.add(key)
        session.trace.rule_matched(node, full_id, cursor)
        match_frame = Frame(frame, cursor)
        for child in node.children:
            if child.tag != "empty":
                ev.call(child, match_frame)
        if session.stop_requested:
            break


def _run_empty(ev: Evaluator, node: Node, frame: Frame, full_id: str) -> None:
    empty = node.child("empty")
    if empty is None:
        return
    object_id = frame.cursor.object_id
    if object_id is not None:
        key = (node.file, full_id + "#empty", _hashable(object_id))
        if ev.session.is_muted(key):
            return
        ev.session.auto_mutes.add(key)
    ev.session.trace.rule_matched(node, full_id + "#empty", frame.cursor)
    ev.content(empty, Frame(frame))


def _hashable(value: object) -> object:
    return value if isinstance(value, (str, int, float, bool)) else repr(value)


def _mute_key(ev: Evaluator, node: Node, frame: Frame, explicit: bool) -> tuple:
    rule_id = ev.arg(node, frame, "rule")
    object_id = ev.arg(node, frame, "id")
    if explicit and (rule_id is None or object_id is None):
        raise WorkflowError(f"<{node.tag}> needs explicit rule and id arguments")
    if rule_id is None:
        rule_id = frame.rule_id
    if object_id is None:
        object_id = frame.cursor.object_id
    if not rule_id or object_id is None:
        raise WorkflowError(f"<{node.tag}>: no rule or object id to {node.tag}")
    return (node.file, str(rule_id), _hashable(object_id))


@function("mute", params=("rule", "id"))
def mute(ev: Evaluator, node: Node, frame: Frame) -> None:
    ev.session.permanent_mutes.add(_mute_key(ev, node, frame, explicit=False))


@function("unmute", params=("rule", "id"))
def unmute(ev: Evaluator, node: Node, frame: Frame) -> None:
    key = _mute_key(ev, node, frame, explicit=True)
    ev.session.permanent_mutes.discard(key)
    ev.session.auto_mutes.discard(key)


@function("stop")
def stop(ev: Evaluator, node: Node, frame: Frame) -> None:
    ev.session.request_stop()


@function("empty")
def empty(ev: Evaluator, node: Node, frame: Frame) -> None:
    raise WorkflowError("<empty> is only allowed directly inside a <rule>")
