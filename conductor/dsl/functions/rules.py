"""Control flow: ``workflow``, ``rule`` (with ``<empty>``), ``mute``,
``unmute`` and ``stop``.

Muting, as Murano 0.2 did it: each object a rule matches is muted for that
rule until the pending actions run, so a pass never handles the same object
twice.  The key of a matched object is its ``id`` for a rule that is not
inside another rule's match, and ``<parent match's key>/<id>`` inside one:
a nested rule that finds the same object (a domain controller) for every
unit mutes it once per unit, and every unit is handled in the same round.
An object without an ``id``, or found under a parent whose key is ``#``
(no id), has the key ``#`` and is never muted.  ``<mute/>`` places a mute
that lasts for the whole deployment.  Mutes are kept per workflow file and
full rule id; nested rule ids are joined by dots (``outer.inner``, the
seed's notation; 0.2's own ``outer/inner`` is accepted in ``rule=``).

After a nested ``<rule>``, when the workflow has had side effects, the rest
of the enclosing rule's body is skipped for that match (0.2): the next
match goes on, and the workflow runs again from the top.
"""
from __future__ import annotations

from dataclasses import dataclass

from fornace.common.errors import WorkflowError
from fornace.conductor.dsl.engine import Evaluator, function
from fornace.conductor.dsl.query import Query, compile_query
from fornace.conductor.dsl.querytext import QueryText, evaluate, query_text
from fornace.conductor.dsl.scope import UNMUTABLE, Frame
from fornace.conductor.dsl.xmlload import Node


@function("workflow")
def workflow(ev: Evaluator, node: Node, frame: Frame) -> bool:
    """Run the rules once; return early after a rule that changed the model."""
    context = ev.context
    context.side_effects = False
    for child in node.children:
        ev.call(child, frame)
        if context.stop_requested:
            break
        if child.tag == "rule" and context.side_effects:
            return True
    return context.side_effects


@dataclass(frozen=True)
class RuleInfo:
    id: str
    query: Query | None  # None when the match is a <parameter>
    text: QueryText | None = None  # a <parameter> of text and calls (values bound as data)


def _prepare_rule(node: Node) -> None:
    query = None
    text = None
    if "match" in node.params:
        text = query_text(node.params["match"], wrap=True)
    elif "match" in node.attrs:
        query = compile_query(node.attrs["match"])
    else:
        raise WorkflowError("<rule> needs a match (attribute or <parameter>)")
    rule_id = node.attrs.get("id") or f"line{node.line}"
    if "." in rule_id or "/" in rule_id:
        raise WorkflowError(f"<rule> id {rule_id!r} must not contain '.' or '/' "
                            "(they join the ids of nested rules)")
    node.extra = RuleInfo(rule_id, query, text)


@function("rule", params=("match", "desc", "id", "limit"), body_tags=("empty",),
          prepare=_prepare_rule)
def rule(ev: Evaluator, node: Node, frame: Frame) -> None:
    info: RuleInfo = node.extra
    context = ev.context
    full_id = f"{frame.rule_id}.{info.id}" if frame.rule_id else info.id
    frame.rule_id = full_id
    query = rule_query(ev, node, frame)
    limit = int(ev.arg(node, frame, "limit") or 0)
    matches = context.find(query, frame.cursor)
    if not matches:
        _run_empty(ev, node, frame)
        return
    file = node.file
    parent_key = frame.object_key
    body = [child for child in node.children if child.tag != "empty"]
    for index, cursor in enumerate(matches):
        if 0 < limit <= index:  # muted matches take their place too (0.2)
            break
        key = object_key(cursor.value, parent_key)
        if key != UNMUTABLE:
            mute = (file, full_id, key)
            if context.is_muted(mute):
                continue
            context.auto_mutes.add(mute)
        context.trace.rule_matched(node, full_id, cursor, query)
        match_frame = Frame(frame, cursor)
        match_frame.object_key = key
        for child in body:
            ev.call(child, match_frame)
            if child.tag == "rule" and context.side_effects:
                break  # the rest of this body waits for the next pass (0.2)
        if context.stop_requested:
            break


def rule_query(ev: Evaluator, node: Node, frame: Frame) -> Query:
    """The query of a rule's match: compiled at load time, or its ``<parameter>``
    evaluated in ``frame``."""
    info: RuleInfo = node.extra
    if info.query is not None:
        return info.query
    match = ev.arg(node, frame, "match") if info.text is None \
        else evaluate(ev, frame, info.text)
    if isinstance(match, Query):
        return match
    if not isinstance(match, str) or not match.strip():
        raise WorkflowError(f"<rule>: match parameter evaluated to {match!r}")
    return compile_query(match)


def object_key(value: object, parent_key: object) -> object:
    """The mute key of a matched object under its parent match's key (0.2)."""
    if parent_key == UNMUTABLE or not isinstance(value, dict) or "id" not in value:
        return UNMUTABLE
    if parent_key is None:
        return _hashable(value["id"])
    return f"{parent_key}/{value['id']}"


def _run_empty(ev: Evaluator, node: Node, frame: Frame) -> None:
    """``<empty>`` runs whenever nothing matched (0.2 never mutes it)."""
    empty = node.child("empty")
    if empty is None:
        return
    ev.context.trace.rule_matched(node, frame.rule_id + "#empty", frame.cursor)
    ev.content(empty, Frame(frame))


def _hashable(value: object) -> object:
    return value if isinstance(value, (str, int, float, bool)) else repr(value)


def _mute_key(ev: Evaluator, node: Node, frame: Frame) -> tuple | None:
    """(file, rule, object key) from the arguments or the current rule and object.

    None when there is nothing to name (no rule, or an object without a key):
    0.2 then leaves the mutes alone.
    """
    rule_id = ev.arg(node, frame, "rule")
    key = ev.arg(node, frame, "id")
    rule_id = frame.rule_id if rule_id is None else str(rule_id).replace("/", ".")
    if key is None:
        key = frame.object_key
    if not rule_id or key is None or key == UNMUTABLE:
        return None
    return (node.file, rule_id, _hashable(key))


@function("mute", params=("rule", "id"))
def mute(ev: Evaluator, node: Node, frame: Frame) -> None:
    key = _mute_key(ev, node, frame)
    if key is not None:
        ev.context.permanent_mutes.add(key)


@function("unmute", params=("rule", "id"))
def unmute(ev: Evaluator, node: Node, frame: Frame) -> None:
    key = _mute_key(ev, node, frame)
    if key is not None:
        ev.context.permanent_mutes.discard(key)
        ev.context.auto_mutes.discard(key)


@function("stop")
def stop(ev: Evaluator, node: Node, frame: Frame) -> None:
    ev.context.request_stop()


@function("empty")
def empty(ev: Evaluator, node: Node, frame: Frame) -> None:
    raise WorkflowError("<empty> is only allowed directly inside a <rule>")
