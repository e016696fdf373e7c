"""Running a round's pending actions: Heat first, then agent commands.

All ``update-cf-stack`` actions of a round are merged into one template and
one stack update (0.2); deletes follow; agent commands come last because they
need the instances.  Each action's callback runs its ``<success>`` or
``<failure>`` block; a stop requested by a callback cancels what is left.
"""
from __future__ import annotations

import datetime
from typing import Any, Callable

from fornace.common.errors import LocatedError, WorkflowError
from fornace.conductor.dsl.deferred import detached
from fornace.conductor.dsl.pending import DELETE_STACK, SEND_COMMAND, UPDATE_STACK, Action
from fornace.conductor.executors.base import (AgentExecutor, PlanRequest,
                                              StackExecutor, StackFailure, StackRequest,
                                              StackSource, run_plans)
from fornace.conductor.executors.cfn import merge
from fornace.conductor.plans import PlanIds, build_plan, read_reply
from fornace.conductor.templates import TemplateStore


def heat_error(message: str, reason: str) -> dict[str, Any]:
    """The error a ``<failure>`` block of a Heat action sees (0.2 shape)."""
    return {"message": message, "strerror": reason,
            "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat()}


def _located(action: Action, exc: LocatedError) -> WorkflowError:
    """A template problem, located at the workflow element that queued the action."""
    file, _, line = action.where.rpartition(":")
    return WorkflowError(f"<{action.kind}>: {exc}", file or None,
                         int(line) if line.isdigit() else None)


class NullHooks:
    """What :class:`ActionRunner` calls around each Heat round and agent command.

    These do nothing (no job around the actions: everything runs, nothing is
    recorded); :class:`fornace.conductor.jobs.hooks.JobHooks` is the job's."""

    def levels(self, actions: list[Action]) -> list[list[Action]]:
        return [actions]

    def stack_started(self, batch: list[Action], template: dict[str, Any]) -> Any:
        return None

    def stack_finished(self, token: Any, batch: list[Action], ok: bool, value: Any) -> None:
        pass

    def command_decision(self, action: Action, plan: dict[str, Any],
                         mappings: dict[str, Any]) -> tuple[str, Any]:
        return "run", None

    def command_finished(self, token: Any, action: Action, ok: bool, value: Any) -> None:
        pass

    def callback_started(self, action: Action) -> None:
        """Before an action's ``<success>``/``<failure>`` block runs."""

    def callback_ended(self, action: Action) -> None:
        """After it ran (or raised).  Two calls, not a context manager: this
        happens for every action of a deployment."""

    def changed(self, path: str, base: Any = None) -> None:
        """The model changed at ``path`` (``base``: the object a ``#name.`` path starts at)."""

    def log(self, plan_id: str, lines: list[str]) -> None:
        pass

    def halted(self) -> str | None:
        """Why the job must stop at its next step (its lock was lost), or None."""
        return None


class ActionRunner:
    def __init__(self, store: TemplateStore, stacks: StackExecutor, agents: AgentExecutor,
                 stack_name: str, unit_labels: Callable[[], dict[str, frozenset[str]]],
                 stopped: Callable[[], bool], trace: Any, plan_seed: str | None = None,
                 hooks: NullHooks | None = None) -> None:
        self.store = store
        self.hooks = hooks or NullHooks()
        self.plan_ids = PlanIds(plan_seed)
        self.stacks = stacks
        self.agents = agents
        self.stack_name = stack_name
        self.unit_labels = unit_labels
        self.stopped = stopped
        self.trace = trace

    def run(self, actions: list[Action]) -> None:
        """Run ``actions``; any left when a stop is requested are cancelled.

        A stop requested by a callback keeps the next kinds of actions from
        running, but every action that did run gets its callback: its result
        exists and the model must record it.
        """
        try:
            for kind, runner in ((UPDATE_STACK, self._update_stack),
                                 (DELETE_STACK, self._delete_stack),
                                 (SEND_COMMAND, self._send_commands)):
                batch = [a for a in actions if a.kind == kind]
                if batch and not self.stopped():
                    runner(batch)
        finally:
            self.cancel(actions)

    def cancel(self, actions: list[Action]) -> None:
        """Mark the actions that did not run as cancelled."""
        for action in actions:
            if action.outcome == "pending":
                action.outcome = "cancelled"
                self.trace.action_finished(action, "cancelled", None)

    def _finish(self, action: Action, ok: bool, value: Any) -> None:
        self.trace.action_finished(action, "success" if ok else "failure", value)
        self.hooks.callback_started(action)
        try:
            if ok:
                action.succeed(value)
            else:
                action.fail(value)
        finally:
            self.hooks.callback_ended(action)

    def _update_stack(self, batch: list[Action]) -> None:
        template: dict[str, Any] = {}
        parameters: dict[str, Any] = {}
        sources = []
        for action in batch:
            mappings = detached(action.mappings)
            try:
                fragment = self.store.heat_template(action.template, mappings)
            except LocatedError as exc:
                raise _located(action, exc) from None
            resources = fragment.get("Resources") or fragment.get("resources") or {}
            action.resource_names = sorted(resources) if isinstance(resources, dict) else []
            merge(template, fragment)
            parameters.update(detached(action.arguments))
            sources.append(StackSource(action.template, mappings))
        request = StackRequest(self.stack_name, template, parameters, sources)
        token = self.hooks.stack_started(batch, template)
        ok, value = self._stack_call(lambda: self.stacks.apply(request))
        self.hooks.stack_finished(token, batch, ok, value)
        for action in batch:
            self._finish(action, ok, dict(value))

    def _delete_stack(self, batch: list[Action]) -> None:
        ok, value = self._stack_call(lambda: self.stacks.delete(self.stack_name))
        for action in batch:
            self._finish(action, ok, None if ok else dict(value))

    @staticmethod
    def _stack_call(call: Callable[[], Any]) -> tuple[bool, Any]:
        try:
            return True, call() or {}
        except StackFailure as exc:
            return False, heat_error(exc.message, exc.reason)
        except Exception as exc:  # an executor bug must not kill the deployment
            return False, heat_error(f"{type(exc).__name__}: {exc}", "executor error")

    def _send_commands(self, batch: list[Action]) -> None:
        """One dependency level after the other (:meth:`NullHooks.levels`)."""
        labels = self.unit_labels()
        for level in self.hooks.levels(batch):
            if self.stopped():
                return   # what is left is cancelled by run()
            self._send_level(level, labels)

    def _send_level(self, batch: list[Action], labels: dict[str, frozenset[str]]) -> None:
        requests, sent, settled = [], [], []
        for action in batch:
            mappings = detached(action.mappings)
            try:
                plan = build_plan(self.store, action.template, mappings)
            except LocatedError as exc:
                raise _located(action, exc) from None
            self.plan_ids.assign(f"{action.service}/{action.unit}", plan)
            decision, value = self.hooks.command_decision(action, plan, mappings)
            if decision != "run":   # replayed (unchanged) or blocked by a failed dependency
                settled.append((action, decision == "replay", value))
                continue
            sent.append((action, value))
            requests.append(PlanRequest(
                service=action.service, unit=action.unit, template=action.template,
                plan=plan, timeout=action.timeout,
                labels=labels.get(action.unit, frozenset({action.unit}))))
        replies = run_plans(self.agents, requests)
        for action, ok, value in settled:
            self._finish(action, ok, value)
        for (action, token), reply in zip(sent, replies, strict=True):
            ok, value = read_reply(reply, action.timeout)
            self.hooks.command_finished(token, action, ok, value)
            self._finish(action, ok, value)
