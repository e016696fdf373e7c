"""Simulated cloud: executors that answer without any OpenStack or VM.

Every stack update succeeds with the configured outputs and every agent
command succeeds with the configured result value (``"ok"`` by default),
except where a :class:`Fault` says a template (optionally on one unit) fails
or times out.  Operators use it through ``fornace workflow simulate``; tests
and the benchmark use it to run whole workflows in memory.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable

from fornace.conductor.executors.base import (AgentExecutor, JobAgents, PlanReply, PlanRequest,
                                              StackExecutor, StackFailure, StackRequest)
from fornace.conductor.executors.cfn import merge, remove_resources


@dataclass(frozen=True)
class Fault:
    """``TEMPLATE`` or ``TEMPLATE:UNIT`` (unit id, name or hostname)."""

    template: str
    unit: str | None = None

    @classmethod
    def parse(cls, text: str) -> "Fault":
        template, _, unit = text.partition(":")
        if not template:
            raise ValueError(f"{text!r}: expected TEMPLATE or TEMPLATE:UNIT")
        return cls(template, unit or None)

    def hits_unit(self, template: str, labels: frozenset[str]) -> bool:
        return template == self.template and (self.unit is None or self.unit in labels)

    def hits_stack(self, template: str, mappings: dict[str, Any]) -> bool:
        if template != self.template:
            return False
        return self.unit is None or any(v == self.unit for v in mappings.values())


@dataclass
class SimulatedCloud:
    """Settings shared by the simulated Heat and agent sides."""

    stack_outputs: dict[str, Any] = field(default_factory=dict)
    command_results: dict[str, Any] = field(default_factory=dict)  # template -> value
    default_result: Any = "ok"
    failures: list[Fault] = field(default_factory=list)
    timeouts: list[Fault] = field(default_factory=list)

    def executors(self) -> tuple["SimulatedStacks", "SimulatedAgents"]:
        return SimulatedStacks(self), SimulatedAgents(self)


class SimulatedStacks(StackExecutor):
    @classmethod
    def factory(cls, conf: Any) -> Callable[[Any], "SimulatedStacks"]:
        """A simulated cloud per task: every stack action succeeds."""
        return lambda task: cls(SimulatedCloud())

    def __init__(self, cloud: SimulatedCloud) -> None:
        self.cloud = cloud
        self.stacks: dict[str, dict[str, Any]] = {}
        self.removals: list[tuple[str, list[str]]] = []   # every remove() call

    def apply(self, request: StackRequest) -> dict[str, Any]:
        for source in request.sources:
            for fault in self.cloud.timeouts:
                if fault.hits_stack(source.template, source.mappings):
                    raise StackFailure(f"timed out waiting for stack {request.stack_name}",
                                       "simulated timeout")
            for fault in self.cloud.failures:
                if fault.hits_stack(source.template, source.mappings):
                    raise StackFailure(
                        f"stack {request.stack_name} failed: simulated failure of "
                        f"template {source.template}", "simulated failure")
        current = self.stacks.get(request.stack_name, {})
        self.stacks[request.stack_name] = merge(current, copy.deepcopy(request.template))
        return copy.deepcopy(self.cloud.stack_outputs)

    def delete(self, stack_name: str) -> None:
        self.stacks.pop(stack_name, None)

    def remove(self, stack_name: str, resources: list[str]) -> dict[str, Any]:
        """Drop the resources from the stored template; a stack left empty is deleted."""
        self.removals.append((stack_name, list(resources)))
        current = self.stacks.get(stack_name)
        if current is None:
            return {}
        removal = remove_resources(current, resources, stack_name)
        if removal.empty:
            self.delete(stack_name)
            return {}
        if removal.changed:
            self.stacks[stack_name] = removal.template
        return self._declared_outputs(removal.template)

    def _declared_outputs(self, template: dict[str, Any]) -> dict[str, Any]:
        """The configured outputs the template still declares.

        ``apply`` answers every configured output, as the simulator cannot
        evaluate templates; after a removal, outputs that went with the removed
        resources must not come back, so only declared ones are given.
        """
        declared = template.get("Outputs") or template.get("outputs") or {}
        return {key: copy.deepcopy(value) for key, value in self.cloud.stack_outputs.items()
                if isinstance(declared, dict) and key in declared}


class SimulatedAgents(AgentExecutor):
    unit_queues = False   # no agent, no queue: nothing to write down or delete

    def __init__(self, cloud: SimulatedCloud) -> None:
        self.cloud = cloud
        self.plans: list[PlanRequest] = []

    @classmethod
    def for_job(cls, job: JobAgents) -> "SimulatedAgents":
        """A simulated fleet for the conductor (``--agents simulator``): every plan
        answered "ok" at once, no VM and no broker queue involved."""
        return cls(SimulatedCloud())

    def run(self, requests: list[PlanRequest]) -> list[PlanReply]:
        self.plans.extend(requests)
        return [self._reply(request) for request in requests]

    def _reply(self, request: PlanRequest) -> PlanReply:
        cloud = self.cloud
        if any(f.hits_unit(request.template, request.labels) for f in cloud.timeouts):
            return PlanReply(timed_out=True)
        commands = request.plan.get("Commands") or []
        if any(f.hits_unit(request.template, request.labels) for f in cloud.failures):
            return PlanReply({"IsException": False, "Result": [{
                "IsException": True,
                "Result": ["SimulatedFailure",
                           f"simulated failure of {request.template} on unit {request.unit}"],
            }]})
        value = cloud.command_results.get(request.template, cloud.default_result)
        return PlanReply({"IsException": False, "Result": [
            {"IsException": False, "Result": [copy.deepcopy(value)]} for _ in commands]})
