"""Execution plans sent to agents and the reading of their results (0.2)."""
from __future__ import annotations

import collections
import hashlib
import uuid
from typing import Any

from fornace.common.canonicaljson import canonical_json
from fornace.common.errors import TemplateError
from fornace.conductor.executors.base import PlanReply
from fornace.conductor.templates import TemplateStore


def build_plan(store: TemplateStore, template: str, mappings: dict[str, Any]) -> dict[str, Any]:
    """Substitute mappings into a plan template and inline its scripts (base64).

    The plan gets its ``ID`` from :class:`PlanIds`, once per deployment run.
    """
    plan = store.agent_template(template, mappings)
    scripts = plan.get("Scripts", [])
    if not isinstance(scripts, list) or not all(isinstance(s, str) for s in scripts):
        raise TemplateError(f"agent template {template!r}: Scripts must be a list of file names")
    if not isinstance(plan.get("Commands", []), list):
        raise TemplateError(f"agent template {template!r}: Commands must be a list")
    plan["ScriptNames"] = list(scripts)  # the 2.0 format runs scripts by name; 0.2 ignores it
    plan["Scripts"] = [store.script_base64(name) for name in scripts]
    plan.setdefault("Commands", [])
    plan.setdefault("RebootOnCompletion", 0)
    plan.pop("ID", None)          # given by PlanIds.assign
    return plan


class PlanIds:
    """Plan ids for one deployment run.

    With a ``seed`` (the task's message id, the same when the broker hands a
    task to another conductor after a crash) the ids are derived from the
    seed, the unit, the plan's content and how many identical plans that unit
    was sent before in this run: the rerun sends the same ids, and agents
    answer plans they already ran from their journals instead of running
    them twice.  A new deployment has a new seed, so its plans run.  Without
    a seed (simulations, tests) ids are random.
    """

    def __init__(self, seed: str | None = None) -> None:
        self.seed = seed
        self._sent: collections.Counter = collections.Counter()
        self._scripts: dict[str, str] = {}   # digest by script text: the same few scripts

    def _script_digest(self, script: Any) -> str:
        if not isinstance(script, str):
            return canonical_json(script)
        found = self._scripts.get(script)
        if found is None:
            found = self._scripts[script] = hashlib.sha256(script.encode()).hexdigest()
        return found

    def assign(self, unit: str, plan: dict[str, Any]) -> str:
        if self.seed is None:
            plan["ID"] = uuid.uuid4().hex
            return plan["ID"]
        content = canonical_json({k: v for k, v in plan.items() if k not in ("ID", "Scripts")})
        scripts = "\0".join(self._script_digest(script) for script in plan.get("Scripts") or [])
        key = (unit, content, scripts)   # identical plans to one unit are told apart by count
        self._sent[key] += 1
        text = "\0".join((self.seed, unit, content, scripts, str(self._sent[key])))
        plan["ID"] = hashlib.sha256(text.encode()).hexdigest()[:32]
        return plan["ID"]


def _messages(value: Any) -> list:
    if isinstance(value, list):
        return value
    return [] if value is None else [value]


def read_reply(reply: PlanReply, timeout: float | None) -> tuple[bool, Any]:
    """(True, per-command entries) or (False, 0.2 error list for ``<failure>``)."""
    if reply.timed_out:
        limit = f"within {timeout:g} seconds" if timeout is not None else "in time"
        return False, [{"type": "timeout", "timeout": timeout,
                        "messages": [f"no answer from the agent {limit}"]}]
    result = reply.result
    if not isinstance(result, dict) or not isinstance(result.get("Result", []), list):
        return False, [{"type": "general", "messages": ["malformed result from the agent"]}]
    if result.get("IsException"):
        return False, [{"type": "general", "messages": _messages(result.get("Result"))}]
    entries = result.get("Result") or []
    errors = [{"type": "inner", "messages": _messages(entry.get("Result"))}
              for entry in entries if isinstance(entry, dict) and entry.get("IsException")]
    return (False, errors) if errors else (True, entries)
