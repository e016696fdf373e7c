"""Why a rule matches an object, or not: ``fornace why ENV RULE [UNIT]``.

A rule's match is a JSONPath walked step by step from where the rule runs
(the model's root, or each object its enclosing rule matched).  Here it is
walked permissively: every object a step reaches is kept, and an object that
a filter refused carries why -- the step (``[?(@.type in (...))]``), the
object it tested, and the clauses that made the filter false
(:mod:`fornace.conductor.dsl.clauses`).  An object is matched when no step
of the rule's match, nor of any enclosing rule's, refused it or the object
above it.  A matched object also says what made it match and what the rule
would then do (the calls in its body).

The model is taken as it is given (the caller prepares it as a deployment
would start from it); mutes and the changes earlier rules make during a run
are not simulated: this is the rule's first look at that model.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Iterable

from fornace.common.cursor import Cursor, unit_cursors
from fornace.common.errors import FornaceError, UnknownName, WorkflowError
from fornace.conductor.dsl.clauses import clause_tree, failing, holding
from fornace.conductor.dsl.engine import Evaluator
from fornace.conductor.dsl.functions.rules import RuleInfo, rule_query
from fornace.conductor.dsl.query import Query
from fornace.conductor.dsl.scope import Frame
from fornace.conductor.dsl.trace import hostname
from fornace.conductor.dsl.workflows import Workflow
from fornace.conductor.dsl.xmlload import Node

MAX_OBJECTS = 200     # objects an explanation lists (then a count of the others)
MAX_WALK = 20_000     # objects a walk keeps, whatever the model's size
MAX_DOES = 20         # calls of a rule's body listed as what it would do
CLOSE = 5             # close names offered for a name that names nothing


@dataclass(frozen=True)
class RuleRef:
    """A rule of a workflow file: its element, its id as traces name it (``outer.inner``),
    its place (``Deploy.xml:12``) and the rules it is nested in (outermost first)."""

    node: Node
    id: str
    at: str
    enclosing: tuple[Node, ...]

    @property
    def desc(self) -> str | None:
        return self.node.attrs.get("desc")

    def names(self) -> list[str]:
        """The names a user may give it by."""
        return [self.at, self.id, f"{self.at.rpartition(':')[0]}:{self.id}"] + (
            [self.desc] if self.desc else [])

    def summary(self) -> dict[str, Any]:
        info: RuleInfo = self.node.extra
        return {"id": self.id, "at": self.at, "desc": self.desc,
                "match": info.query.text if info.query is not None else None,
                "enclosing": [_at(node) for node in self.enclosing]}


def _at(node: Node) -> str:
    return f"{str(node.file).rpartition('/')[2]}:{node.line}"


def rules_of(workflows: Iterable[Workflow]) -> list[RuleRef]:
    """Every rule of the workflows, nested ones too, in file order."""
    found: list[RuleRef] = []

    def visit(node: Node, prefix: str, enclosing: tuple[Node, ...]) -> None:
        for child in node.children:
            if child.tag == "rule" and isinstance(child.extra, RuleInfo):
                full = f"{prefix}.{child.extra.id}" if prefix else child.extra.id
                found.append(RuleRef(child, full, _at(child), enclosing))
                visit(child, full, enclosing + (child,))
            else:
                visit(child, prefix, enclosing)
    for workflow in workflows:
        visit(workflow.root, "", ())
    return found


def find_rule(rules: list[RuleRef], wanted: str) -> RuleRef:
    """The rule named ``wanted``: its place (``Deploy.xml:12``), its id (``line12``,
    ``outer.inner``, or ``Deploy.xml:line12``) or its ``desc``; UnknownName naming
    the close ones when none is, or the rules when several are."""
    text = wanted.strip()
    for exact in (lambda r: text == r.at, lambda r: text in (r.id, r.names()[2]),
                  lambda r: r.desc is not None and text.casefold() == r.desc.strip().casefold()):
        named = [rule for rule in rules if exact(rule)]
        if len(named) == 1:
            return named[0]
        if named:
            places = ", ".join(f"{r.at} ({r.desc or r.id})" for r in named[:10])
            raise UnknownName(f"{len(named)} rules are named {wanted!r}: {places}; name one "
                              f"by its file:line", [r.at for r in named])
    names = list(dict.fromkeys(name for rule in rules for name in rule.names()))
    close = difflib.get_close_matches(text, names, n=CLOSE, cutoff=0.5)
    said = f"; close names: {', '.join(repr(c) for c in close)}" if close else ""
    raise UnknownName(f"no rule is named {wanted!r} (name a rule by its desc, its id or its "
                      f"file:line, as traces show them){said}", close)


def find_unit(model: dict[str, Any], wanted: str) -> Cursor:
    """The unit whose id, hostname or name is ``wanted`` (UnknownName otherwise)."""
    units = unit_cursors(model)
    for key in (lambda u: u.get("id"), lambda u: hostname(Cursor(u)), lambda u: u.get("name")):
        named = [c for c in units if str(key(c.value)) == wanted]
        if len(named) == 1:
            return named[0]
        if named:
            raise UnknownName(f"{len(named)} units are named {wanted!r}: name one by its id "
                              f"({', '.join(str(c.object_id) for c in named[:10])})",
                              [str(c.object_id) for c in named])
    names = sorted({str(n) for c in units for n in (c.object_id, hostname(c),
                                                    c.value.get("name")) if n})
    close = difflib.get_close_matches(wanted, names, n=CLOSE, cutoff=0.5)
    said = f"; close names: {', '.join(repr(c) for c in close)}" if close else ""
    raise UnknownName(f"no unit has the id, hostname or name {wanted!r}{said}", close)


class _Reading:
    """What the calls of a ``<parameter name="match">`` may use here: the model and
    the frames, nothing of a deployment (a call needing more is not explained)."""

    deferred_values = False

    def __init__(self, model: dict[str, Any]) -> None:
        self.model = model

    def __getattr__(self, name: str) -> Any:
        raise WorkflowError(f"its match calls what only a running deployment has ({name})")

    def find(self, query: Query, cursor: Cursor) -> list[Cursor]:
        return query.find(cursor)


Failure = dict[str, Any]


def _walk(query: Query, at: Cursor, failure: Failure | None,
          rule: str) -> list[tuple[Cursor, Failure | None]]:
    """Every object ``query`` reaches from ``at``, each with the first refusal met."""
    current: list[tuple[Cursor, Failure | None]] = [(query.start(at), failure)]
    pairs = []
    if query.first_on_self is not None and query.self_part is not None:
        pairs.append((query.self_part, query.first_on_self, True))
    pairs += [(part, step, False) for part, step in zip(query.parts, query.steps)]
    for part, step, on_self in pairs:
        following: list[tuple[Cursor, Failure | None]] = []
        clause = clause_tree(part.expression, part.values) if part.expression else None
        for cursor, refused in current:
            if clause is None:
                following += [(found, refused) for found in step([cursor])]
            elif on_self:
                following.append(_tested(clause, cursor, refused, part.text, rule))
            else:
                following += [_tested(clause, Cursor(item, key, cursor), refused, part.text,
                                      rule) for key, item in _items(cursor.value)]
            if len(following) > MAX_WALK:
                break
        current = following[:MAX_WALK]
    return current


def _items(value: Any) -> Iterable[tuple[Any, Any]]:
    if isinstance(value, list):
        return enumerate(value)
    if isinstance(value, dict):
        return value.items()
    return ()


def _tested(clause: Any, cursor: Cursor, refused: Failure | None, step: str,
            rule: str) -> tuple[Cursor, Failure | None]:
    if refused is not None or clause.fn(cursor.value):
        return cursor, refused
    return cursor, {"rule": rule, "step": step, "object": cursor.path_text(),
                    "because": failing(clause, cursor.value)}


# calls that only compute a value: what the rule does is the calls around them
_VALUES = frozenset({"select", "select-all", "select-single", "true", "false", "null", "text",
                     "int", "list", "map", "function", "generate-hostname",
                     "prepare-user-data"})
_SAID = ("template", "path", "target", "level", "rule", "entity")


def _computed(param: Node) -> str:
    """How a parameter's value is computed, when it is one ``<select path=...>``
    (``template=(select ::temp.instance.template)``), else ``computed``."""
    if param.blank and len(param.children) == 1 and param.children[0].tag == "select":
        path = param.children[0].attrs.get("path")
        if path and set(param.children[0].attrs) == {"path"}:
            return f"select {path}"
    return "computed"


def _does(node: Node) -> list[str]:
    """The calls of a rule's body (nested rules named, not entered; value calls
    left out), as what it would do: ``update-cf-stack template=LinuxInstance``,
    ``on success: set path=temp.instanceName``."""
    found: list[str] = []

    def visit(parent: Node, label: str) -> None:
        for child in parent.children:
            if len(found) >= MAX_DOES:
                return
            if child.tag == "rule":
                found.append(f"{label}rule at line {child.line}")
            elif child.tag in ("success", "failure"):
                visit(child, f"on {child.tag}: ")
            elif child.tag not in _VALUES and child.tag != "empty":
                said = " ".join([f"{k}={v}" for k, v in child.attrs.items() if k in _SAID]
                                + [f"{k}=({_computed(v)})" for k, v in child.params.items()
                                   if k in _SAID and k not in child.attrs])
                found.append(f"{label}{child.tag}{' ' + said if said else ''}")
                visit(child, label)
    visit(node, "")
    return found


def _why_matched(ref: RuleRef, queries: list[Query], chain: list[Cursor]) -> list[str]:
    """What the filters of the rule (and the enclosing ones) read to match."""
    lines: list[str] = []
    for query, cursor in zip(queries, chain):
        depth = query.depth
        for part in query.filters:
            if depth is None or part.depth is None:
                continue
            tested = cursor.up(depth - part.depth)
            clause = clause_tree(part.expression or "", part.values)
            # an object above the match is named; the matched object is the row's own
            above = f"{tested.path_text()}: " if tested is not chain[-1] else ""
            lines += [f"{above}{line}" for line in holding(clause, tested.value)]
    return lines


def explain_rule(workflows: list[Workflow], model: dict[str, Any], rule: str,
                 unit: str | None = None) -> dict[str, Any]:
    """Whether the rule named ``rule`` matches each object its match reaches in
    ``model`` (or those of ``unit``: the unit, the objects above it and below
    it), and why; UnknownName for a rule or unit that names nothing."""
    ref = find_rule(rules_of(workflows), rule)
    wanted = find_unit(model, unit) if unit is not None else None
    evaluator = Evaluator(_Reading(model))   # type: ignore[arg-type]
    nodes = ref.enclosing + (ref.node,)
    # (object, its refusal, the queries and the objects matched at each level)
    levels: list[tuple[Cursor, Failure | None, list[Query], list[Cursor]]] = [
        (Cursor(model), None, [], [])]
    problem = None
    for depth, node in enumerate(nodes):
        following = []
        for at, refused, queries, chain in levels:
            frame = Frame(None, at)
            try:
                query = rule_query(evaluator, node, frame)
            except FornaceError as exc:
                problem = f"the match of {_at(node)} cannot be evaluated here: {exc}"
                continue
            name = ref.id if node is ref.node else _at(node)
            for found, why in _walk(query, at, refused, name):
                following.append((found, why, queries + [query], chain + [found]))
        levels = following[:MAX_WALK]
    objects = []
    for found, refused, queries, chain in levels:
        if wanted is not None and not _related(found, wanted):
            continue
        entry: dict[str, Any] = {"object": found.path_text(), "id": found.object_id,
                                 "host": hostname(found), "matched": refused is None}
        if isinstance(found.value, dict) and found.value.get("name") is not None:
            entry["name"] = str(found.value["name"])
        if len(chain) > 1:     # a nested rule: which match of the enclosing rule it ran in
            entry["within"] = chain[-2].path_text()
        if refused is None:
            entry["because"] = _why_matched(ref, queries, chain)
        else:
            entry["refused"] = refused
        objects.append(entry)
    answer: dict[str, Any] = {
        "rule": ref.summary(), "does": _does(ref.node),
        "matched": sum(1 for o in objects if o["matched"]), "objects": objects[:MAX_OBJECTS],
        "more": max(0, len(objects) - MAX_OBJECTS)}
    if wanted is not None:
        answer["unit"] = {"object": wanted.path_text(), "id": wanted.object_id,
                          "host": hostname(wanted)}
    if problem is not None:
        answer["problem"] = problem
    return answer


def _related(found: Cursor, unit: Cursor) -> bool:
    """Whether ``found`` is the unit, above it or below it."""
    mine, theirs = found.path(), unit.path()
    shorter = min(len(mine), len(theirs))
    return mine[:shorter] == theirs[:shorter]
