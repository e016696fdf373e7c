"""Pending actions queued by workflow rules and run between fixpoints.

An action records what to do (template, mappings, target unit) and two
callbacks that run the ``<success>``/``<failure>`` block of the element that
queued it, in the frame it was queued from.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

UPDATE_STACK = "update-cf-stack"
DELETE_STACK = "delete-cf-stack"
SEND_COMMAND = "send-command"


@dataclass(eq=False)
class Action:
    kind: str
    where: str  # file:line of the element that queued it
    rule_id: str
    template: str | None = None
    service: str | None = None
    unit: str | None = None
    mappings: dict[str, Any] = field(default_factory=dict)
    arguments: dict[str, Any] = field(default_factory=dict)
    timeout: float | None = None
    blocks: Any = None  # runs <success>/<failure>: .run(succeeded, value)
    outcome: str = "pending"  # then "success", "failure" or "cancelled"
    resource_names: list[str] = field(default_factory=list)  # of its stack fragment

    def succeed(self, result: Any) -> None:
        self.outcome = "success"
        if self.blocks is not None:
            self.blocks.run(True, result)

    def fail(self, error: Any) -> None:
        self.outcome = "failure"
        if self.blocks is not None:
            self.blocks.run(False, error)
