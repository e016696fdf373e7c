"""What happened during a deployment, round by round.

``NullTrace`` costs nothing and is what daemons use; ``RecordingTrace``
keeps every rule match, model change, action and report per round for
``fornace workflow simulate`` and the tests.  Secrets are masked as they are
recorded.  Given ``on_round``, it hands each round over as soon as the round
is over (its actions ran and their callbacks too) and forgets it, so a
trace of thousands of units is printed as it goes instead of held whole.
"""
from __future__ import annotations

from typing import Any, Callable

from fornace.common.cursor import Cursor
from fornace.common.jsonlimits import JsonLimitError, measure
from fornace.common.secrets import mask_text, masked
from fornace.common.tracetext import cause_text, matched_text
from fornace.conductor.dsl.clauses import match_cause
from fornace.conductor.dsl.pending import Action
from fornace.conductor.dsl.query import Query
from fornace.conductor.dsl.xmlload import Node


def hostname(cursor: Cursor) -> str | None:
    """The ``state.hostname`` of a matched object (a unit), when it has one."""
    value = cursor.value
    state = value.get("state") if isinstance(value, dict) else None
    host = state.get("hostname") if isinstance(state, dict) else None
    return host if isinstance(host, str) and host else None


class NullTrace:
    def round_started(self, number: int) -> None: ...
    def pass_started(self, number: int) -> None: ...
    def rule_matched(self, node: Node, rule_id: str, cursor: Cursor,
                     query: Query | None = None) -> None: ...
    def changed(self, rule_id: str, where: str, path: str, value: Any) -> None: ...
    def action_queued(self, action: Action) -> None: ...
    def action_finished(self, action: Action, outcome: str, value: Any) -> None: ...
    def reported(self, report: dict[str, Any]) -> None: ...


RoundSink = Callable[[dict[str, Any], list[tuple[str, dict[str, Any]]]], None]


ROUND_BYTES = 16 * 1024 * 1024   # rule matches and model changes a trace keeps per round
#: what an entry costs the round's budget besides its strings (keys, quotes, commas)
_ENTRY_BYTES = 60


class RecordingTrace(NullTrace):
    def __init__(self, on_round: RoundSink | None = None,
                 round_bytes: int = ROUND_BYTES) -> None:
        """``on_round(round, events)``: called with each finished round (see flush).

        ``round_bytes``: past that many bytes of rule matches and changed
        values in one round (a workflow rewriting a big value pass after pass,
        or a rule that never settles), a change is kept with a note instead of
        its value, and later matches and changes are only counted (the
        round's ``dropped``), so the trace's memory and what ``simulate``
        prints stay bounded whatever the workflow does."""
        self.on_round = on_round
        self.round_bytes = round_bytes
        self.rounds: list[dict[str, Any]] = []
        self.events: list[tuple[str, dict[str, Any]]] = []  # chronological
        self.secrets: set[str] = set()
        self._actions: dict[int, dict[str, Any]] = {}
        self._kept = 0   # bytes of rule matches and changed values kept in this round

    def _add(self, kind: str, entry: dict[str, Any]) -> None:
        self._current()[kind].append(entry)
        self.events.append((kind, entry))

    def _room(self, kind: str, entry: dict[str, Any]) -> bool:
        """Whether the round's budget still has room for ``entry`` (its strings);
        if not, it is counted in the round's ``dropped`` instead."""
        size = _ENTRY_BYTES + sum(len(v) for v in entry.values() if isinstance(v, str))
        size += sum(len(line) for line in entry.get("cause") or ())
        if self._kept + size <= self.round_bytes:
            self._kept += size
            return True
        current = self._current()
        if "dropped" not in current:
            current["dropped"] = {"rules": 0, "changes": 0, "kept_bytes": self.round_bytes}
            self.events.append(("dropped", current))
        current["dropped"][kind] += 1
        return False

    def _current(self) -> dict[str, Any]:
        if not self.rounds:
            self.round_started(1)
        return self.rounds[-1]

    def flush(self) -> None:
        """Hand the round recorded so far to ``on_round`` and forget it.

        Called when the next round starts, and by the owner once the run is
        over; without ``on_round`` everything is kept.
        """
        if self.on_round is None or not self.rounds:
            return
        entry, events = self.rounds.pop(), self.events
        self.rounds, self.events, self._actions, self._kept = [], [], {}, 0
        self.on_round(entry, events)

    def round_started(self, number: int) -> None:
        self.flush()
        entry = {"round": number, "rules": [], "changes": [], "actions": [], "reports": []}
        self.rounds.append(entry)
        self.events.append(("round", entry))

    def rule_matched(self, node: Node, rule_id: str, cursor: Cursor,
                     query: Query | None = None) -> None:
        """``query``: the rule's match, whose filters' reads are kept as the cause."""
        cause = [mask_text(line, self.secrets) for line in match_cause(query, cursor)]
        entry = {"rule": rule_id, "where": node.where, "desc": node.attrs.get("desc"),
                 "object": cursor.path_text(), "id": cursor.object_id,
                 "host": hostname(cursor), "cause": cause}
        if self._room("rules", entry):
            self._add("rules", entry)

    def changed(self, rule_id: str, where: str, path: str, value: Any) -> None:
        if not self._room("changes", {"rule": rule_id, "where": where, "path": path}):
            return
        room = self.round_bytes - self._kept
        try:
            size = measure(value, max_bytes=max(room, 0), max_depth=1 << 20)
        except JsonLimitError:
            shown: Any = (f"(not kept: this round's trace already holds "
                          f"{self._kept // 1024} KiB of changed values)")
        else:
            self._kept += size
            shown = masked(value, self.secrets)
        self._add("changes", {"rule": rule_id, "where": where, "path": path, "value": shown})

    def action_queued(self, action: Action) -> None:
        entry = {"kind": action.kind, "template": action.template,
                 "service": action.service, "unit": action.unit,
                 "mappings": masked(action.mappings, self.secrets),
                 "arguments": masked(action.arguments, self.secrets),
                 "rule": action.rule_id, "where": action.where, "outcome": "pending"}
        self._actions[id(action)] = entry
        self._add("actions", entry)

    def action_finished(self, action: Action, outcome: str, value: Any) -> None:
        entry = self._actions.pop(id(action), None)
        if entry is not None:
            entry["outcome"] = outcome
            if value is not None:
                entry["result" if outcome == "success" else "error"] = masked(value, self.secrets)
            self.events.append(("finished", entry))

    def reported(self, report: dict[str, Any]) -> None:
        self._add("reports", dict(report))


def _short(value: Any, limit: int = 70) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _target(action: dict[str, Any]) -> str:
    return f" on unit {action['unit']}" if action.get("unit") else ""


def _line(kind: str, entry: dict[str, Any]) -> str:
    if kind == "round":
        return f"== round {entry['round']}"
    if kind == "rules":
        cause = cause_text(entry)
        return (f"  rule {entry['rule']} at {entry['where']} matched {matched_text(entry)}"
                + (f"\n      because {cause}" if cause else ""))
    if kind == "changes":
        return f"    set {entry['path']} = {_short(entry['value'])}"
    if kind == "dropped":
        dropped = entry["dropped"]
        return (f"  ... {dropped['rules']} more rule match(es) and {dropped['changes']} more "
                f"model change(s) of round {entry['round']} not shown: a round's trace keeps "
                f"{dropped['kept_bytes'] // 1024} KiB")
    if kind == "actions":
        return f"    queued {entry['kind']} {entry['template'] or ''}{_target(entry)}"
    if kind == "finished":
        line = f"  {entry['kind']} {entry['template'] or ''}{_target(entry)}: {entry['outcome']}"
        if entry.get("error") is not None:
            line += f" {_short(entry['error'], 120)}"
        return line
    return (f"    report [{entry['level']}] {entry['entity'] or '-'} "
            f"{entry['id'] or ''}: {entry['text']}")


def format_events(events: list[tuple[str, dict[str, Any]]]) -> str:
    """Readable, chronological lines for operators."""
    return "\n".join(_line(kind, entry) for kind, entry in events)
