"""What differs between two job traces: the actions queued and the rules that fired.

``fornace workflow simulate --environment ENV`` runs edited workflows on a
simulated cloud and compares what they would do with what the environment's
last real job did; both runs are traces in the form
:class:`fornace.conductor.jobs.tracing.JobTrace` records (rounds of events:
``rule``, ``queued``, ``ended``...).  This module only reads such documents
(plain JSON, nothing imported from the engine) and says what differs:

* actions, keyed by (kind, template, unit) and counted: one a run queued more
  often than the other is *added* or *removed*; one both queued but from
  another rule or place (``at``, file:line) or with another outcome is
  *changed*;
* rule firings, keyed by (rule, object): one that happened in only one run
  is *added* or *removed*.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

Key = tuple[str, str, str]   # (kind, template, unit); "" when the trace has none


@dataclass(frozen=True)
class Queued:
    """An action a run queued, with how it ended (``None``: the trace never says)."""

    kind: str
    template: str
    unit: str
    rule: str | None
    at: str | None
    outcome: str | None

    @property
    def key(self) -> Key:
        return (self.kind, self.template, self.unit)

    @property
    def origin(self) -> tuple[str | None, str | None, str | None]:
        return (self.rule, self.at, self.outcome)

    def document(self) -> dict[str, Any]:
        return {"kind": self.kind, "template": self.template or None,
                "unit": self.unit or None, "rule": self.rule, "at": self.at,
                "outcome": self.outcome}


def events(document: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every event of a trace document, in order (malformed parts skipped)."""
    for entry in document.get("rounds") or []:
        if isinstance(entry, dict):
            for event in entry.get("events") or []:
                if isinstance(event, dict):
                    yield event


def queued_actions(document: dict[str, Any]) -> list[Queued]:
    """The actions of a trace in the order they were queued, each with the
    outcome of its ``ended`` event."""
    found: list[dict[str, Any]] = []
    numbered: dict[Any, dict[str, Any]] = {}
    for event in events(document):
        if event.get("e") == "queued":
            entry = {"kind": str(event.get("kind") or ""),
                     "template": str(event.get("template") or ""),
                     "unit": str(event.get("unit") or ""), "rule": event.get("rule"),
                     "at": event.get("at"), "outcome": None}
            found.append(entry)
            if event.get("n") is not None:
                numbered[event["n"]] = entry
        elif event.get("e") == "ended" and event.get("n") in numbered:
            numbered[event["n"]]["outcome"] = event.get("outcome")
    return [Queued(**entry) for entry in found]


def fired_rules(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(rule, object) -> the first ``rule`` event of it, in the order they fired."""
    fired: dict[tuple[str, str], dict[str, Any]] = {}
    for event in events(document):
        if event.get("e") == "rule":
            key = (str(event.get("rule") or ""), str(event.get("object") or ""))
            fired.setdefault(key, {"rule": event.get("rule"), "object": event.get("object"),
                                   "id": event.get("id"), "at": event.get("at")})
    return fired


def _grouped(actions: list[Queued]) -> dict[Key, list[Queued]]:
    groups: dict[Key, list[Queued]] = {}
    for action in actions:
        groups.setdefault(action.key, []).append(action)
    return groups


def compare(real: dict[str, Any], simulated: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """What ``simulated`` does that ``real`` did not, and the reverse:
    ``{"added", "removed", "changed", "rules_added", "rules_removed"}``.

    Actions of one key are paired first with their exact twins (same rule,
    place and outcome), then in order: a pair left is *changed* (``before``:
    the real one, ``after``: the simulated one); what is left unpaired in the
    real run is *removed*, in the simulated one *added*.
    """
    before, after = _grouped(queued_actions(real)), _grouped(queued_actions(simulated))
    added: list[dict[str, Any]] = []
    removed: list[dict[str, Any]] = []
    changed: list[dict[str, Any]] = []
    for key in dict.fromkeys([*before, *after]):
        olds, news = list(before.get(key, [])), list(after.get(key, []))
        for old in list(olds):
            twin = next((new for new in news if new.origin == old.origin), None)
            if twin is not None:
                olds.remove(old)
                news.remove(twin)
        for old, new in zip(olds, news):
            kind, template, unit = key
            changed.append({"kind": kind, "template": template or None, "unit": unit or None,
                            "before": _origin(old), "after": _origin(new)})
        removed.extend(old.document() for old in olds[len(news):])
        added.extend(new.document() for new in news[len(olds):])
    rules_before, rules_after = fired_rules(real), fired_rules(simulated)
    return {"added": added, "removed": removed, "changed": changed,
            "rules_added": [v for k, v in rules_after.items() if k not in rules_before],
            "rules_removed": [v for k, v in rules_before.items() if k not in rules_after]}


def _origin(action: Queued) -> dict[str, Any]:
    return {"rule": action.rule, "at": action.at, "outcome": action.outcome}


def differs(diff: dict[str, list[dict[str, Any]]]) -> bool:
    return any(diff.values())


# -- for people ---------------------------------------------------------------------------

def _unit(unit: str | None, names: dict[str, str]) -> str:
    if not unit:
        return ""
    return f" on unit {names.get(unit, unit)}"


def _action(entry: dict[str, Any], names: dict[str, str]) -> str:
    template = f" {entry['template']}" if entry.get("template") else ""
    return f"{entry['kind']}{template}{_unit(entry.get('unit'), names)}"


def _from(origin: dict[str, Any], always: bool = False) -> str:
    """``rule 'R' at F.xml:12``, then how the action ended when it did not
    succeed (or ``always``)."""
    outcome = origin.get("outcome")
    ended = f", {outcome or 'not ended'}" if always or outcome != "success" else ""
    return f"rule {origin.get('rule')!r} at {origin.get('at')}{ended}"


def _rule(entry: dict[str, Any]) -> str:
    return (f"rule {entry.get('rule')!r} at {entry.get('at')} on {entry.get('object')}"
            + (f" ({entry['id']})" if entry.get("id") is not None else ""))


def diff_lines(diff: dict[str, list[dict[str, Any]]],
               unit_names: dict[str, str] | None = None) -> list[str]:
    """One line per difference: ``+`` what the simulation adds, ``-`` what it no
    longer does, ``~`` an action queued from elsewhere or ending otherwise.
    ``unit_names``: unit id -> the name to show."""
    names = unit_names or {}
    lines = [f"+ {_action(e, names)} ({_from(e)})" for e in diff["added"]]
    lines += [f"- {_action(e, names)} ({_from(e)})" for e in diff["removed"]]
    lines += [f"~ {_action(e, names)}: {_from(e['before'], True)} -> "
              f"{_from(e['after'], True)}" for e in diff["changed"]]
    lines += [f"+ {_rule(e)} fires" for e in diff["rules_added"]]
    lines += [f"- {_rule(e)} no longer fires" for e in diff["rules_removed"]]
    return lines


def summary(diff: dict[str, list[dict[str, Any]]]) -> str:
    """The last line: how many differences of each kind, or that there are none."""
    if not differs(diff):
        return "no differences"
    return (f"{len(diff['added'])} action(s) added, {len(diff['removed'])} removed, "
            f"{len(diff['changed'])} changed; {len(diff['rules_added'])} rule firing(s) "
            f"added, {len(diff['rules_removed'])} removed")
