"""What happened during a deployment, round by round.

``NullTrace`` costs nothing and is what daemons use; ``RecordingTrace``
keeps every rule match, model change, action and report per round for
``fornace workflow simulate`` and the tests.  Secrets are masked as they are
recorded.
"""
from __future__ import annotations

from typing import Any

from .actions import Action
from .cursor import Cursor
from .secrets import masked
from .xmlload import Node


class NullTrace:
    def round_started(self, number: int) -> None: ...
    def rule_matched(self, node: Node, rule_id: str, cursor: Cursor) -> None: ...
    def changed(self, rule_id: str, where: str, path: str, value: Any) -> None: ...
    def action_queued(self, action: Action) -> None: ...
    def action_finished(self, action: Action, outcome: str, value: Any) -> None: ...
    def reported(self, report: dict[str, Any]) -> None: ...


class RecordingTrace(NullTrace):
    def __init__(self) -> None:
        self.rounds: list[dict[str, Any]] = []
        self.secrets: set[str] = set()
        self._actions: dict[int, dict[str, Any]] = {}

    def _current(self) -> dict[str, Any]:
        if not self.rounds:
            self.round_started(1)
        return self.rounds[-1]

    def round_started(self, number: int) -> None:
        self.rounds.append({"round": number, "rules": [], "changes": [],
                            "actions": [], "reports": []})

    def rule_matched(self, node: Node, rule_id: str, cursor: Cursor) -> None:
        self._current()["rules"].append({
            "rule": rule_id, "where": node.where, "object": cursor.path_text(),
            "id": cursor.object_id})

    def changed(self, rule_id: str, where: str, path: str, value: Any) -> None:
        self._current()["changes"].append({
            "rule": rule_id, "where": where, "path": path,
            "value": masked(value, self.secrets)})

    def action_queued(self, action: Action) -> None:
        entry = {"kind": action.kind, "template": action.template,
                 "service": action.service, "unit": action.unit,
                 "mappings": masked(action.mappings, self.secrets),
                 "arguments": masked(action.arguments, self.secrets),
                 "rule": action.rule_id, "where": action.where, "outcome": "pending"}
        self._actions[id(action)] = entry
        self._current()["actions"].append(entry)

    def action_finished(self, action: Action, outcome: str, value: Any) -> None:
        entry = self._actions.pop(id(action), None)
        if entry is not None:
            entry["outcome"] = outcome
            if value is not None:
                entry["result" if outcome == "success" else "error"] = masked(value, self.secrets)

    def reported(self, report: dict[str, Any]) -> None:
        self._current()["reports"].append(dict(report))


def _short(value: Any, limit: int = 70) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _action_line(action: dict[str, Any]) -> str:
    target = f" unit {action['unit']}" if action.get("unit") else ""
    line = f"    {action['kind']} {action['template'] or ''}{target} -> {action['outcome']}"
    if action.get("error") is not None:
        line += f": {_short(action['error'], 100)}"
    return line


def format_text(rounds: list[dict[str, Any]]) -> str:
    """A readable per-round trace for operators."""
    lines = []
    for entry in rounds:
        lines.append(f"== round {entry['round']}")
        for rule in entry["rules"]:
            lines.append(f"  rule {rule['rule']} ({rule['where']}) matched {rule['object']}")
        for change in entry["changes"]:
            lines.append(f"    set {change['path']} = {_short(change['value'])}"
                         f"  [{change['rule']}]")
        if entry["actions"]:
            lines.append("  actions:")
            lines.extend(_action_line(action) for action in entry["actions"])
        for report in entry["reports"]:
            lines.append(f"  report [{report['level']}] {report['entity'] or '-'} "
                         f"{report['id'] or ''}: {report['text']}")
    return "\n".join(lines)
