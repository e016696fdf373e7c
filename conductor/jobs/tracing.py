"""A real job's trace: which rule fired on which object, and why.

``fornace workflow simulate`` prints a :class:`~fornace.conductor.dsl.trace.RecordingTrace`;
a job the conductor runs for real keeps :class:`JobTrace` instead: the same
events, made small enough to send to the API and keep with the job.  Per
round, a list of short events (``e`` says which):

* ``rule``: a rule matched an object (``pass``, ``rule``, ``at`` its workflow file:line,
  ``object`` path, ``id``, ``desc``; ``host``: the object's ``state.hostname``
  when it has one; ``cause``: what the match's filters read, such as
  ``state.kvDeployed: absent`` -- traces kept before these two have neither);
* ``set``: what a rule wrote (``path``, ``value``; masked, long ones cut);
* ``queued``: an action a rule queued (``n`` its number in the job, ``kind``,
  ``template``, ``unit``, ``rule``, ``at``), or a catalog operation a lifecycle
  action runs without a workflow (``kind`` ``operation``, ``operation``,
  ``template``, ``unit``, ``reason``);
* ``task``: the job task that action became (``n``, ``change``: its change id),
  so the job page links a task to the rule that queued it;
* ``ended``: how action ``n`` ended (``outcome``, ``error``);
* ``report``: a report of the job (``level``, ``text``).

Before the rounds, the document names the package versions the job ran
(``packages``: ``kvstore 1.1.0``, or ``data folder`` when the environment is
pinned to none) and the units and services change detection sent to be
configured again before the workflows ran (``reconfigured``: ``id``,
``name`` (a unit's hostname), ``reason``: its description changed, or a file
its commands came from).

Secrets -- the job's and any field named like one -- are masked as events are
recorded.  Past :data:`TRACE_BYTES` of JSON nothing more is kept but a note,
so a workflow looping for hours keeps a bounded trace.  :func:`encode`
gives the compressed form the contract carries (1.7).
"""
from __future__ import annotations

import base64
import json
import os
import zlib
from typing import Any

from fornace.common.cursor import Cursor
from fornace.common.secrets import MASK, is_secret_key, mask_text, masked
from fornace.conductor.dsl.pending import Action
from fornace.conductor.dsl.clauses import match_cause
from fornace.conductor.dsl.query import Query
from fornace.conductor.dsl.trace import NullTrace, hostname
from fornace.conductor.dsl.xmlload import Node

TRACE_BYTES = 4 * 1024 * 1024   # JSON kept per job, then "trace truncated"
VALUE_CHARS = 160               # a written value longer than that (as JSON) is cut
TEXT_CHARS = 400                # an error or report text longer than that is cut
TRUNCATED = "trace truncated: it reached {limit} KiB; later events were not kept"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


class JobTrace(NullTrace):
    """Records a job's trace compactly (see the module's docstring)."""

    def __init__(self, secrets: set[str] | None = None, max_bytes: int = TRACE_BYTES) -> None:
        # the Session adds the secrets it finds to this very set
        self.secrets: set[str] = set(secrets or ())
        self.max_bytes = max_bytes
        self.rounds: list[dict[str, Any]] = []
        self.size = 64             # about the JSON of what is kept (the envelope's)
        self.truncated = False
        self._pass = 1
        self._numbers: dict[int, int] = {}   # id(action) -> its number in the job
        # kept so that no id is reused meanwhile (None: a lifecycle operation's number)
        self._actions: list[Action | None] = []
        self._places: dict[str, str] = {}    # file:line as the conductor has it -> shown
        self._frozen: frozenset[str] = frozenset()
        self.packages: list[str] | None = None   # what the job ran (job_packages)
        self.reconfigured: list[dict[str, Any]] = []

    def _at(self, where: str) -> str:
        """``Deploy.xml:12``: the workflow file's name, not the conductor's folders."""
        shown = self._places.get(where)
        if shown is None:
            path, _, line = str(where).rpartition(":")
            shown = self._places[where] = (f"{os.path.basename(path)}:{line}" if path
                                           else str(where))
        return shown

    # -- recording ---------------------------------------------------------------
    def _secrets(self) -> frozenset[str]:
        """The secrets as one frozenset, made again only when the set grew (the
        masking functions cache their pattern by it: a new one per event cost
        more than the rest of the trace)."""
        if len(self._frozen) != len(self.secrets):
            self._frozen = frozenset(self.secrets)
        return self._frozen

    def _add(self, event: dict[str, Any], size: int | None = None) -> None:
        """Keep ``event``; ``size``: about its JSON length, when the caller knows it
        (else estimated from its texts) -- cheaper than writing each event's JSON,
        and the cap needs no more than that."""
        if self.truncated:
            return
        if size is None:
            size = 8 * len(event) + sum(
                len(value) if type(value) is str else 12 for value in event.values())
        if self.size + size > self.max_bytes:
            self.truncated = True
            return
        self.size += size
        if not self.rounds:
            self.round_started(1)
        self.rounds[-1]["events"].append(event)

    def _text(self, value: Any, limit: int = TEXT_CHARS) -> str:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        return _short(mask_text(text, self._secrets()) if self.secrets else text, limit)

    def _value(self, path: str, value: Any) -> tuple[Any, int]:
        """What a change wrote, as kept (masked, long ones cut), and its JSON length."""
        last = path.rsplit(".", 1)[-1].split("[", 1)[0]
        if value is not None and is_secret_key(last):
            return MASK, 5
        kind = type(value)
        if kind is bool or kind is int or kind is float or value is None:
            return value, 6
        if kind is str and len(value) < VALUE_CHARS - 8:
            if self.secrets:
                value = mask_text(value, self._secrets())
            return value, len(value) + 2
        value = masked(value, self._secrets())
        text = json.dumps(value, separators=(",", ":"), default=str)
        return (value, len(text)) if len(text) <= VALUE_CHARS else (
            _short(text, VALUE_CHARS), VALUE_CHARS + 2)

    def round_started(self, number: int) -> None:
        self._pass = 1
        if self.truncated:
            return
        self.size += 32
        self.rounds.append({"round": number, "events": []})

    def pass_started(self, number: int) -> None:
        self._pass = number

    def rule_matched(self, node: Node, rule_id: str, cursor: Cursor,
                     query: Query | None = None) -> None:
        if self.truncated:
            return
        where, path, object_id = self._at(node.where), cursor.path_text(), cursor.object_id
        event = {"e": "rule", "pass": self._pass, "rule": rule_id, "at": where,
                 "object": path, "id": object_id}
        size = 70 + len(rule_id or "") + len(where) + len(path) + (
            len(object_id) if type(object_id) is str else 12)
        desc = node.attrs.get("desc")
        if desc:
            event["desc"] = desc
            size += len(desc) + 10
        host = hostname(cursor)
        if host:
            event["host"] = host = _short(host, VALUE_CHARS)
            size += len(host) + 10
        cause = match_cause(query, cursor)
        if cause:
            if self.secrets:
                cause = [mask_text(line, self._secrets()) for line in cause]
            event["cause"] = cause
            size += sum(len(line) + 3 for line in cause) + 10
        self._add(event, size)

    def changed(self, rule_id: str, where: str, path: str, value: Any) -> None:
        if not self.truncated:
            shown, size = self._value(path, value)
            self._add({"e": "set", "rule": rule_id, "path": path, "value": shown},
                      size + len(rule_id or "") + len(path) + 40)

    def action_queued(self, action: Action) -> None:
        number = self._numbers[id(action)] = len(self._actions) + 1
        self._actions.append(action)
        event = {"e": "queued", "n": number, "kind": action.kind, "rule": action.rule_id,
                 "at": self._at(action.where)}
        for name in ("template", "unit"):
            if getattr(action, name):
                event[name] = str(getattr(action, name))
        self._add(event)

    def action_task(self, action: Action, change_id: str) -> None:
        """The job task ``action`` became (see :class:`fornace.conductor.jobs.hooks.JobHooks`)."""
        number = self._numbers.get(id(action))
        if number is not None:
            self._add({"e": "task", "n": number, "change": change_id})

    def action_finished(self, action: Action, outcome: str, value: Any) -> None:
        number = self._numbers.get(id(action))
        if number is None:
            return
        event: dict[str, Any] = {"e": "ended", "n": number, "outcome": outcome}
        if outcome != "success" and value is not None:
            event["error"] = self._text(value)
        self._add(event)

    def operation_sent(self, operation: str, template: str, unit: str, reason: str,
                       change_id: str) -> int:
        """A catalog operation a lifecycle action runs on a unit without a workflow
        (check, execute_operation, uninstall, scale in...): a ``queued`` event of
        kind ``operation`` and the task it is; its number, for :meth:`operation_ended`."""
        number = len(self._actions) + 1
        self._actions.append(None)          # a number no workflow action takes
        self._add({"e": "queued", "n": number, "kind": "operation", "operation": operation,
                   "template": template, "unit": unit, "reason": reason})
        self._add({"e": "task", "n": number, "change": change_id})
        return number

    def operation_ended(self, number: int, ok: bool, summary: str) -> None:
        event: dict[str, Any] = {"e": "ended", "n": number,
                                 "outcome": "success" if ok else "failure"}
        if not ok and summary:
            event["error"] = self._text(summary)
        self._add(event)

    def reported(self, report: dict[str, Any]) -> None:
        self._add({"e": "report", "level": report.get("level"),
                   "text": self._text(str(report.get("text") or ""))})

    def reconfigure(self, object_id: str, name: str | None, reason: str) -> None:
        """Change detection sends ``object_id`` to be configured again, for ``reason``."""
        entry = {"id": object_id, "name": name, "reason": self._text(reason)}
        size = 40 + len(object_id) + len(name or "") + len(entry["reason"])
        if self.truncated or self.size + size > self.max_bytes:
            self.truncated = True
            return
        self.size += size
        self.reconfigured.append(entry)

    # -- the result ----------------------------------------------------------------
    def document(self, environment_id: str, job_id: str, action: str) -> dict[str, Any]:
        """The whole trace as the API keeps it."""
        body: dict[str, Any] = {"version": 1, "environment_id": environment_id,
                                "job_id": job_id, "action": action, "rounds": self.rounds,
                                "truncated": self.truncated}
        if self.packages is not None:
            body["packages"] = self.packages
        if self.reconfigured:
            body["reconfigured"] = self.reconfigured
        if self.truncated:
            body["note"] = TRUNCATED.format(limit=self.max_bytes // 1024)
        return body


def encode(document: dict[str, Any]) -> dict[str, Any]:
    """The ``trace`` of a contract 1.7 job event: the document's JSON,
    zlib-compressed and in base64 (a trace compresses about tenfold)."""
    raw = json.dumps(document, separators=(",", ":"), default=str).encode()
    return {"encoding": "zlib+base64", "size": len(raw),
            "data": base64.b64encode(zlib.compress(raw, 6)).decode("ascii")}
