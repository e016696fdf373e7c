"""The lifecycle actions of a job: what Cloudify and Unfurl users know.

``deploy``/``install`` run the workflows with change detection; ``plan``
runs them against the simulator and only records what would run;
``uninstall`` tears the units down in reverse dependency order;
``execute_operation`` runs a catalog operation on the selected units;
``heal`` reinstalls a unit (its relationships unlinked first, then
established again by the workflows); ``scale`` adds or removes units;
``check`` runs each unit's check operation and updates its status.

Nothing here knows a service type: types speak through the catalog
(:mod:`fornace.common.catalog`) and the workflows.
"""
from __future__ import annotations

import copy
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from fornace.common.actionparams import check_parameters, operation_mappings, select_units
from fornace.common.catalog import (Catalog, Operation, declared_secrets, render, truthy,
                                    unit_cursor, with_type_views)
from fornace.common.contract import Task, clean_model
from fornace.common.errors import FornaceError
from fornace.common.jsonlimits import JsonLimitError, loads
from fornace.common.modelview import (find_object, hostname_of, iter_units, service_type,
                                      services_of, unit_labels)
from fornace.common.topology import build
from fornace.conductor.dsl.workflows import Workflow
from fornace.conductor.executors.base import (AgentExecutor, PlanRequest, StackExecutor,
                                              StackFailure, run_plans)
from fornace.conductor.executors.simulator import SimulatedCloud
from fornace.conductor.jobs import changes
from fornace.conductor.jobs.hooks import JobHooks
from fornace.conductor.jobs.nodestatus import flag, observing, set_node, status_of, summarize
from fornace.conductor.jobs.records import JobRecorder, result_summary
from fornace.conductor.jobs.sources import RunSources
from fornace.conductor.plans import PlanIds, build_plan, read_reply
from fornace.conductor.session import Outcome, Session, Settings
from fornace.conductor.templates import TemplateStore

LOG = logging.getLogger(__name__)

Reporter = Callable[[dict[str, Any]], None]


@dataclass
class Job:
    """Everything one job needs; :func:`run_job` runs it."""

    task: Task
    workflows: list[Workflow]
    store: TemplateStore
    catalog: Catalog | None
    stacks: StackExecutor
    agents: AgentExecutor
    recorder: JobRecorder
    engine: Settings
    reporter: Reporter | None = None
    plan_seed: str | None = None
    halted: Callable[[], str | None] | None = None   # why to stop now (the lock was lost)
    # what happened, rule by rule (a JobTrace; None: nothing recorded)
    trace: Any = None
    # the files the job's data runs, for change detection (None: not compared)
    sources: RunSources | None = None

    @property
    def model(self) -> dict[str, Any]:
        return self.task.model

    @property
    def secret_keys(self) -> frozenset[str]:
        """The field names its catalog's types declare secret (``writeOnly``)."""
        return declared_secrets(self.catalog)

    @property
    def stack_name(self) -> str:
        return f"e{self.task.environment_id}"

    def report(self, text: str, level: str = "info", entity: str | None = "environment",
               id: str | None = None) -> None:
        body = {"id": id if id is not None else self.task.environment_id, "entity": entity,
                "text": self.recorder.mask(text), "details": None, "level": level,
                "environment_id": self.task.environment_id}
        if self.trace is not None:
            self.trace.reported(body)
        if self.reporter is not None:
            try:
                self.reporter(body)
            except Exception as exc:  # a lost report must not end the job
                LOG.warning("job %s: could not send report %r: %s", self.recorder.job_id,
                            text, exc)


def run_job(job: Job) -> Outcome:
    """Run the job's action; never raises for a problem of the job itself."""
    action = job.task.action
    handler = _HANDLERS.get(action)
    try:
        if handler is None:
            raise FornaceError(f"unknown action {action!r}")
        job.engine.limits.check_model(job.model, "the environment's model")
        with_type_views(job.model, job.catalog)   # temp.instance of each service
        if action not in ("deploy", "delete"):
            job.task.parameters = check_parameters(action, job.task.parameters or {},
                                                   job.model, job.catalog)
        if action == "plan":   # a preview: no node of the environment moves
            return handler(job)
        with observing(job.recorder.node):   # node states go out as they change
            return handler(job)
    except FornaceError as exc:
        return failed(job, exc)
    except Exception as exc:  # never lose the model to a bug
        LOG.exception("job %s (%s) failed", job.recorder.job_id, action)
        job.report(f"{action} stopped by an internal error: {type(exc).__name__}: {exc}",
                   "error")
        return Outcome(clean_model(job.model), "error", 0, [])


def failed(job: Job, problem: Exception) -> Outcome:
    """The end of a job that cannot run (or went wrong): an error report saying why."""
    job.report(f"{job.task.action} failed: {problem}", "error")
    return Outcome(clean_model(job.model), "error", 0, [])


# -- deploy, install, delete, plan ---------------------------------------------------

def _deploy(job: Job, reasons: dict[str, str] | None = None) -> Outcome:
    mode = (job.task.parameters or {}).get("change_detection", "evaluate")
    found = _prepared(job, job.model, mode)
    found.update(reasons or {})
    hooks = JobHooks(lambda: job.model, job.recorder, job.catalog, mode, found,
                     sources=job.sources)
    _wire(job, hooks)
    outcome = Session(job.model, job.workflows, job.store, job.stacks, job.agents, job.engine,
                      reporter=job.reporter, plan_seed=job.plan_seed, hooks=hooks,
                      trace=job.trace, secret_keys=job.secret_keys).run()
    finish_statuses(job.model, hooks.failed_units, hooks.blocked_units)
    return outcome


def _delete(job: Job) -> Outcome:
    hooks = JobHooks(lambda: job.model, job.recorder, job.catalog)
    _wire(job, hooks)
    return Session(job.model, job.workflows, job.store, job.stacks, job.agents, job.engine,
                   reporter=job.reporter, plan_seed=job.plan_seed, hooks=hooks,
                   trace=job.trace, secret_keys=job.secret_keys).run()


def _plan(job: Job) -> Outcome:
    """The next deployment, simulated: its tasks are recorded as ``planned``."""
    model = copy.deepcopy(job.model)
    mode = (job.task.parameters or {}).get("change_detection", "evaluate")
    reasons = _prepared(job, model, mode)
    hooks = JobHooks(lambda: model, job.recorder, job.catalog, mode, reasons, dry_run=True,
                     sources=job.sources)
    if job.trace is not None and hasattr(job.trace, "action_task"):
        hooks.on_task = job.trace.action_task
    stacks, agents = SimulatedCloud().executors()
    outcome = Session(model, job.workflows, job.store, stacks, agents, job.engine,
                      hooks=hooks, trace=job.trace, secret_keys=job.secret_keys).run()
    commands = sum(1 for t in job.recorder.tasks if t.status == "planned" and t.target)
    rounds = sum(1 for t in job.recorder.tasks if t.status == "planned" and not t.target)
    job.report(f"Plan: the next deployment would run {commands} agent command(s) and "
               f"{rounds} stack update(s)"
               + ("" if outcome.status == "success" else f" (simulation ended: {outcome.status})"))
    return Outcome(clean_model(job.model), "success", outcome.rounds, [])


def _prepared(job: Job, model: dict[str, Any], mode: str) -> dict[str, str]:
    """Change detection before the workflows run (:func:`changes.prepare`); each
    unit it sends to be configured again is in the trace with why."""
    reasons = changes.prepare(model, mode, job.sources)
    if job.trace is not None and hasattr(job.trace, "reconfigure"):
        for object_id, reason in reasons.items():
            job.trace.reconfigure(object_id, hostname_of(find_object(model, object_id)),
                                  reason)
    return reasons


def _wire(job: Job, hooks: JobHooks) -> None:
    if hasattr(job.agents, "on_log"):
        job.agents.on_log = hooks.log
    hooks.halted_by = job.halted
    if job.trace is not None and hasattr(job.trace, "action_task"):
        hooks.on_task = job.trace.action_task


def finish_statuses(model: dict[str, Any], failed: set[str],
                    blocked: set[str] = frozenset()) -> None:
    """After a deployment: configured units are started and ok, failed ones are
    in error, blocked ones (a dependency failed) and units never created are
    pending; services sum up their units."""
    for service, unit in iter_units(model):
        state = status_of(unit).get("state")
        if str(unit["id"]) in blocked and str(unit["id"]) not in failed:
            set_node(unit, local="pending")
        elif str(unit["id"]) in failed or state == "error":
            set_node(unit, "error", local="error")
        elif state in ("created", "configuring", "configured", "starting", "started"):
            set_node(unit, "started", local="ok")
        elif state is None:
            set_node(unit, "initial", local="pending")
    for service in services_of(model):
        summarize(service)


# -- running catalog operations --------------------------------------------------------

@dataclass
class Command:
    service: dict[str, Any]
    unit: dict[str, Any]
    operation: Operation
    mappings: dict[str, Any]
    agent_unit: str
    reason: str


def operation_command(job: Job, service: dict, unit: dict, operation: Operation,
                      kwargs: dict[str, Any] | None = None,
                      allow_override: bool | None = None, reason: str = "operation") -> Command:
    mappings = operation_mappings(operation, job.model, service, unit, kwargs, allow_override)
    cursor = unit_cursor(job.model, str(service["id"]), str(unit["id"]))
    agent_unit = str(render(operation.unit, cursor)) if operation.unit else str(unit["id"])
    return Command(service, unit, operation, mappings, agent_unit, reason)


def run_commands(job: Job, commands: list[Command], ids: PlanIds) -> list[tuple[bool, Any]]:
    """Send the commands at once; record each as a task; (ok, value) each."""
    requests, tasks = [], []
    for command in commands:
        plan = build_plan(job.store, str(command.operation.template), command.mappings)
        ids.assign(f"{command.service['id']}/{command.agent_unit}/{command.operation.name}",
                   plan)
        task = job.recorder.task(command.agent_unit, hostname_of(command.unit),
                                 f"{command.operation.name} ({command.operation.template})",
                                 command.reason, status="running",
                                 digest=changes.command_digest(str(command.operation.template),
                                                               command.mappings))
        tasks.append(task)
        requests.append(PlanRequest(service=str(command.service["id"]), unit=command.agent_unit,
                                    template=str(command.operation.template), plan=plan,
                                    timeout=job.engine.agent_timeout,
                                    labels=unit_labels(command.unit) | {command.agent_unit}))
    if hasattr(job.agents, "on_log"):
        by_plan = {r.plan["ID"]: t for r, t in zip(requests, tasks)}
        job.agents.on_log = lambda plan_id, lines: by_plan[plan_id].add_log(lines) \
            if plan_id in by_plan else None
    traced = hasattr(job.trace, "operation_sent")
    numbers = [job.trace.operation_sent(c.operation.name, str(c.operation.template),
                                        c.agent_unit, c.reason, t.change_id)
               for c, t in zip(commands, tasks)] if traced else []
    results = [read_reply(reply, job.engine.agent_timeout)
               for reply in run_plans(job.agents, requests)]
    for number, (task, (ok, value)) in enumerate(zip(tasks, results, strict=True)):
        summary = result_summary(ok, value)
        task.finish("ok" if ok else "error", summary)
        if traced:
            job.trace.operation_ended(numbers[number], ok, summary)
    return results


def _by_levels(job: Job, commands: list[Command], ordered: bool,
               reverse: bool = False) -> list[list[Command]]:
    if not ordered:
        return [commands] if commands else []
    levels = build(job.model, job.catalog).levels()
    if reverse:
        levels = list(reversed(levels))
    groups = []
    for level in levels:
        group = [c for c in commands if str(c.service["id"]) in level]
        if group:
            groups.append(group)
    return groups


def _execute_operation(job: Job) -> Outcome:
    params = job.task.parameters or {}
    name = params["operation"]
    commands, skipped = [], []
    for service, unit in select_units(params, job.model, job.catalog):
        operation = job.catalog.operation(service_type(service), name)
        if operation is None:
            skipped.append((service, unit))
            continue
        commands.append(operation_command(job, service, unit, operation,
                                          params.get("operation_kwargs"),
                                          params.get("allow_kwargs_override")))
    for service, unit in skipped:
        job.recorder.task(str(unit["id"]), hostname_of(unit), name, "operation",
                          status="skipped",
                          summary=f"{service_type(service)} declares {name!r} without an "
                                  f"implementation: nothing to do")
    if not commands and not skipped:
        job.report(f"execute_operation {name}: no unit matches the filters", "warning")
    ids = PlanIds(job.plan_seed)
    failures = 0
    moving, moved = _OPERATION_STATES.get(name, (None, None))
    for group in _by_levels(job, commands, bool(params.get("run_by_dependency_order"))):
        for command in group if moving else ():
            set_node(command.unit, moving)
        for command, (ok, value) in zip(group, run_commands(job, group, ids)):
            where = hostname_of(command.unit) or command.unit["id"]
            if moved:
                set_node(command.unit, moved if ok else "error", local="ok" if ok else "error")
            if ok:
                job.report(f"Operation {name} on {where}: {result_summary(ok, value)}", "info",
                           "unit", str(command.unit["id"]))
            else:
                failures += 1
                job.report(f"Operation {name} on {where} failed: {result_summary(ok, value)}",
                           "error", "unit", str(command.unit["id"]))
    if moving:
        for service in services_of(job.model):
            summarize(service)
    return Outcome(clean_model(job.model), "error" if failures else "success", 1, [])


# the node state of a unit while and after these operations run on it
_OPERATION_STATES = {"stop": ("stopping", "stopped"), "start": ("starting", "started"),
                     "restart": ("starting", "started")}


def _check(job: Job) -> Outcome:
    """Each unit's ``check`` operation (types without one are left as they are)."""
    commands = []
    for service, unit in iter_units(job.model):
        type_name = service_type(service)
        if job.catalog is None or not job.catalog.has_operation(type_name, "check"):
            continue
        operation = job.catalog.operation(type_name, "check")
        if operation is not None and status_of(unit).get("state") not in (None, "deleted"):
            commands.append(operation_command(job, service, unit, operation, reason="check"))
    results = run_commands(job, commands, PlanIds(job.plan_seed)) if commands else []
    for command, (ok, value) in zip(commands, results):
        verdict, detail = _check_verdict(ok, value)
        status_of(command.unit)["check"] = detail
        set_node(command.unit, local=verdict)
        where = hostname_of(command.unit) or command.unit["id"]
        job.report(f"Check of {where}: {verdict}" + (f" ({detail})" if detail else ""),
                   "info" if verdict == "ok" else "warning" if verdict == "degraded" else "error",
                   "unit", str(command.unit["id"]))
    for service in services_of(job.model):
        summarize(service)
    job.report(f"Checked {len(commands)} unit(s)")
    return Outcome(clean_model(job.model), "success", 1, [])


def _check_verdict(ok: bool, value: Any) -> tuple[str, str]:
    """``ok``/``degraded``/``error`` and a detail from a check script's JSON line."""
    for entry in (value or []) if ok else []:
        lines = entry.get("Result") if isinstance(entry, dict) else None
        for line in reversed(lines if isinstance(lines, list) else [lines]):
            try:
                found = loads(line) if isinstance(line, str) else line
            except (json.JSONDecodeError, JsonLimitError, TypeError):
                continue
            if isinstance(found, dict) and found.get("status") in ("ok", "degraded", "error"):
                return found["status"], str(found.get("detail") or "")
    return ("ok", "") if ok else ("error", result_summary(ok, value))


# -- taking units away: uninstall, scale in, heal ----------------------------------------

def _leave(job: Job, pairs: list[tuple[dict, dict]], ids: PlanIds, reason: str,
           stop: bool) -> None:
    """Unlink the units' relationships (and stop them), then remove their
    stack resources; their state is cleared."""
    commands = []
    for service, unit in pairs:
        type_name = service_type(service)
        if job.catalog is None or not job.catalog.known(type_name):
            continue
        cursor = unit_cursor(job.model, str(service["id"]), str(unit["id"]))
        for operation in job.catalog.unlink(type_name):
            if cursor is not None and truthy(cursor, operation.when):
                commands.append(operation_command(job, service, unit, operation, reason=reason))
        if stop and job.catalog.has_operation(type_name, "stop"):
            operation = job.catalog.operation(type_name, "stop")
            if operation is not None and status_of(unit).get("resources"):
                commands.append(operation_command(job, service, unit, operation, reason=reason))
    for service, unit in pairs:
        set_node(unit, "stopping")
    for command, (ok, value) in zip(commands, run_commands(job, commands, ids)):
        if not ok:
            job.report(f"{command.operation.name} on {hostname_of(command.unit)} failed "
                       f"({result_summary(ok, value)}); removing it anyway", "warning", "unit",
                       str(command.unit["id"]))
    resources = [r for _, unit in pairs for r in status_of(unit).get("resources") or []]
    _remove_resources(job, resources, [u for _, u in pairs], reason)


def _remove_resources(job: Job, resources: list[str], owners: list[dict], reason: str) -> None:
    for owner in owners:
        set_node(owner, "deleting")
    if resources:
        task = job.recorder.task(None, "stack", f"remove {', '.join(resources)}", reason,
                                 status="running")
        try:
            job.stacks.remove(job.stack_name, resources)
        except StackFailure as exc:
            task.finish("error", exc.message)
            for owner in owners:
                set_node(owner, "error", local="error")
            raise FornaceError(f"could not remove {', '.join(resources)} from the stack: "
                               f"{exc.message}") from None
        task.finish("ok", f"removed {len(resources)} resource(s)")
    for owner in owners:
        _forget(owner, "deleted", "absent")


def _forget(obj: dict[str, Any], state: str, local: str) -> None:
    """Clear what was configured (the hostname is kept: a reinstall reuses it)."""
    kept = {k: v for k, v in (obj.get("state") or {}).items() if k == "hostname"} \
        if isinstance(obj.get("state"), dict) else {}
    obj["state"] = kept
    status = status_of(obj)
    for key in ("configs", "resources", "check"):
        status.pop(key, None)
    set_node(obj, state, local=local)


def _uninstall(job: Job) -> Outcome:
    """Units leave level by level, dependents first; protected ones stay."""
    ids = PlanIds(job.plan_seed)
    kept = []
    for level in reversed(build(job.model, job.catalog).levels()):
        pairs = []
        for service in services_of(job.model):
            if str(service["id"]) not in level:
                continue
            for unit in service.get("units") or []:
                if flag(unit, "protected"):
                    kept.append(hostname_of(unit) or unit.get("id"))
                else:
                    pairs.append((service, unit))
        if pairs:
            _leave(job, pairs, ids, "uninstall", stop=True)
        for service in services_of(job.model):
            if str(service["id"]) in level and not any(
                    flag(u, "protected") for u in service.get("units") or []):
                _remove_resources(job, list(status_of(service).get("resources") or []),
                                  [service], "uninstall")
    for service in services_of(job.model):
        summarize(service)
    if kept:
        job.report(f"Kept protected unit(s): {', '.join(map(str, kept))}", "warning")
    job.report("Environment uninstalled" + (" (protected units kept)" if kept else ""))
    return Outcome(clean_model(job.model), "success", 1, [])


def _heal(job: Job) -> Outcome:
    unit_id = job.task.parameters["node_instance_id"]
    service, unit = next((s, u) for s, u in iter_units(job.model) if str(u["id"]) == unit_id)
    where = hostname_of(unit) or unit_id
    job.report(f"Healing {where}: reinstalling its instance and what is configured on it",
               "info", "unit", unit_id)
    _leave(job, [(service, unit)], PlanIds(job.plan_seed), "repair", stop=False)
    set_node(unit, "initial", local="pending")
    return _deploy(job, {unit_id: "repair"})


def _scale(job: Job) -> Outcome:
    params = job.task.parameters or {}
    service = next(s for s in services_of(job.model) if str(s["id"]) == params["node_id"])
    units = service.setdefault("units", [])
    delta = int(params.get("delta", 1))
    if delta > 0:
        seed = job.task.job_id or job.plan_seed or ""
        for index in range(delta):
            units.append(_new_unit(service, f"{seed}/{service['id']}/{index}"))
        job.report(f"Scaling {service.get('name')} out by {delta} unit(s)", "info", "service",
                   str(service["id"]))
        return _deploy(job)
    if delta < 0:
        leaving = [u for u in reversed(units) if not flag(u, "protected")][:-delta]
        if len(leaving) < -delta:
            raise FornaceError(f"cannot remove {-delta} unit(s) from {service.get('name')}: "
                               f"only {len(leaving)} are not protected")
        job.report(f"Scaling {service.get('name')} in by {-delta} unit(s): "
                   f"{', '.join(str(hostname_of(u) or u['id']) for u in leaving)}", "info",
                   "service", str(service["id"]))
        _leave(job, [(service, u) for u in leaving], PlanIds(job.plan_seed), "scale in",
               stop=True)
        service["units"] = [u for u in units if not any(u is gone for gone in leaving)]
        summarize(service)
    return Outcome(clean_model(job.model), "success", 1, [])


def _new_unit(service: dict[str, Any], seed: str) -> dict[str, Any]:
    """A unit named as the API names them: ``<service name>_instance_<n>``; its id
    comes from ``seed`` (job, service, ordinal), so a repeated task -- the broker
    redelivered it to another conductor -- adds the same units, not others."""
    base = f"{service.get('name')}_instance_"
    names = {u.get("name") for u in service.get("units") or [] if isinstance(u, dict)}
    number = len(service.get("units") or [])
    while f"{base}{number}" in names:
        number += 1
    return {"id": uuid.uuid5(uuid.NAMESPACE_URL, f"fornace:unit:{seed}").hex,
            "name": f"{base}{number}"}


_HANDLERS: dict[str, Callable[[Job], Outcome]] = {
    "deploy": _deploy, "install": _deploy, "delete": _delete, "plan": _plan,
    "uninstall": _uninstall, "execute_operation": _execute_operation, "heal": _heal,
    "scale": _scale, "check": _check,
}
