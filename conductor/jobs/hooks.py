"""What a job adds around the actions the workflows queue.

:class:`ActionRunner` calls these hooks around each Heat round and each
agent command.  They

* record every Heat round and agent command as a task of the job
  (:mod:`fornace.conductor.jobs.records`) and move the node state of the units concerned
  (:mod:`fornace.conductor.jobs.nodestatus`);
* skip a command that already ran with the same inputs for the same unit
  (change detection, :mod:`fornace.conductor.jobs.changes`): its recorded result is
  replayed to the workflow, no agent is asked;
* send the commands of one round by dependency level (the topology): a
  service's commands go out once those of the services it depends on are
  answered, and are not sent at all -- the task is ``blocked`` and the
  workflow sees a failure -- when one of those failed in this job;
* remember which stack resources belong to which unit or service, so that
  scale in, heal and uninstall can remove exactly theirs.

:class:`fornace.conductor.dispatch.NullHooks` does none of it (plain 0.2
behaviour: simulations, tests).
"""
from __future__ import annotations

from typing import Any, Callable

from fornace.common.catalog import Catalog
from fornace.common.contract import NODE_ENDPOINTS
from fornace.common.cursor import get_path
from fornace.common.modelview import hostname_of, iter_units, services_of
from fornace.common.topology import Topology, TopologyError, build
from fornace.conductor.dispatch import NullHooks
from fornace.conductor.dsl.pending import Action
from fornace.conductor.jobs import changes
from fornace.conductor.jobs.nodestatus import (endpoint_changed, local, set_node, status_of,
                                               summarize)
from fornace.conductor.jobs.records import JobRecorder, TaskRecord, result_summary
from fornace.conductor.jobs.sources import RunSources


def blocked_error(service_name: str, failed: list[str]) -> list[dict[str, Any]]:
    """The 0.2-shaped error a blocked command's ``<failure>`` block sees."""
    names = ", ".join(failed)
    return [{"type": "blocked",
             "messages": ["blocked", f"not deployed: {service_name} depends on {names}, "
                                     f"which failed in this job"]}]


class _ModelIndex:
    """The services and units of the model, by identity and by id, built once
    and kept until the model's structure changes (a service or unit added,
    removed, replaced or given another id): looking up an action's owner
    must not rescan every unit of the model."""

    def __init__(self, model: dict[str, Any]) -> None:
        self.root = model
        pairs = list(iter_units(model))
        self.units = {str(unit["id"]): unit for _, unit in pairs}
        self.service_of = {id(unit): service for service, unit in pairs}   # a unit's service
        self.services = {str(service["id"]): service for service in services_of(model)}
        self.unit_objects = {id(unit) for unit in self.units.values()}
        self.objects = self.unit_objects | {id(service) for service in self.services.values()}


# the end of a path that sets a unit's or service's endpoint (state.hostname...)
_ENDPOINT_SUFFIXES = tuple(f".state.{name}" for name in NODE_ENDPOINTS)


def _structural(path: str) -> bool:
    """Whether a change at ``path`` may add, remove, replace or rename a service or unit."""
    parts = path.split(".")
    if parts[0] != "services":
        return parts[0] in ("", "$") or path.startswith("$")   # the whole model
    return len(parts) <= 4 or (parts[-1] == "id" and len(parts) in (3, 5))


def _runtime_only(path: str, owner_base: bool = False) -> bool:
    """Whether a change at ``path`` is to a service's or unit's state, temp or
    status only (not what the user described: change detection ignores them);
    ``owner_base``: the path is ``#name.rest`` and ``#name`` is a service or unit."""
    parts = path.split(".")
    if owner_base:
        return len(parts) >= 2 and parts[1] in ("state", "temp", "status")
    if parts[0] != "services" or len(parts) < 3:
        return False
    field = parts[4] if len(parts) > 4 and parts[2] == "units" else parts[2]
    return field in ("state", "temp", "status") and (parts[2] != "units" or len(parts) > 4)


class JobHooks(NullHooks):
    def __init__(self, model: Callable[[], dict[str, Any]], recorder: JobRecorder,
                 catalog: Catalog | None, mode: str = "evaluate",
                 reasons: dict[str, str] | None = None, dry_run: bool = False,
                 sources: RunSources | None = None) -> None:
        self.model = model
        self.sources = sources   # what the job runs: recorded with each command
        self.recorder = recorder
        self.catalog = catalog
        self.mode = mode
        self.reasons = dict(reasons or {})
        self.dry_run = dry_run
        self.failed_services: set[str] = set()
        self.failed_units: set[str] = set()
        self.blocked_units: set[str] = set()
        self._capture: list[str] | None = None
        self._pending_record: tuple | None = None   # a finished command, recorded after
                                                    # its <success>/<failure> block ran
        self._plans: dict[str, TaskRecord] = {}
        self._heat_rounds = 0
        self._index: _ModelIndex | None = None
        # description digests by (service, unit) object, until a change to what
        # the user described (anything but state, temp and status) empties it
        # (the objects are kept beside their digests so that no id is reused)
        self._descriptions: dict[tuple[int, int], tuple[Any, Any, str]] = {}
        self._shared: dict[int, tuple[Any, str]] = {}   # service_text by service, likewise
        self._topology: tuple[Any, Topology] | None = None   # (model, its topology), likewise
        self.halted_by: Callable[[], str | None] | None = None   # the conductor's lock watch
        # the job's trace learns which task each action became (JobTrace.action_task)
        self.on_task: Callable[[Action, str], None] | None = None

    def _became(self, actions: list[Action], task: Any) -> Any:
        if self.on_task is not None:
            for action in actions:
                self.on_task(action, task.change_id)
        return task

    def halted(self) -> str | None:
        return self.halted_by() if self.halted_by is not None else None

    # -- ordering ------------------------------------------------------------
    def levels(self, actions: list[Action]) -> list[list[Action]]:
        """Commands grouped by the dependency level of their service."""
        try:
            order = build(self.model(), self.catalog).levels()
        except TopologyError:
            return [actions]
        level_of = {sid: number for number, level in enumerate(order) for sid in level}
        grouped: dict[int, list[Action]] = {}
        for action in actions:
            grouped.setdefault(level_of.get(str(action.service), 0), []).append(action)
        return [grouped[number] for number in sorted(grouped)]

    # -- Heat rounds -------------------------------------------------------------
    def stack_started(self, batch: list[Action], template: dict[str, Any]) -> Any:
        self._heat_rounds += 1
        owned = [(action, self._owner(action)) for action in batch]
        owners = [owner for _, owner in owned if owner is not None]
        new = any(not status_of(o).get("resources") for o in owners)
        names = sorted({str(a.template) for a in batch})
        task = self._became(batch, self.recorder.task(
            None, "stack", f"update-cf-stack {', '.join(names)}", "new" if new else "update",
            status="planned" if self.dry_run else "running"))
        if self.dry_run:
            return (task, owners, [])
        fragments: dict[int, list[str]] = {}
        for action, owner in owned:
            if owner is not None:
                fragments.setdefault(id(owner), []).append(self._fragment(action))
        creating = [o for o in owners if self._is_unit(o) and not status_of(o).get("resources")]
        for owner in creating:   # units whose instance exists keep their node state
            set_node(owner, "creating", change_id=task.change_id)
        self._sum_up(creating)
        for owner in owners:
            task.add_log([f"resources of {owner.get('name') or owner.get('id')}: "
                          f"{', '.join(fragments.get(id(owner), []))}"])
        return (task, owners, creating)

    def stack_finished(self, token: Any, batch: list[Action], ok: bool, value: Any) -> None:
        task, owners, creating = token
        for action in batch:
            owner = self._owner(action)
            if owner is not None and ok:
                resources = status_of(owner).setdefault("resources", [])
                for name in getattr(action, "resource_names", []):
                    if name not in resources:
                        resources.append(name)
        if self.dry_run:
            return
        for owner in creating if ok else [o for o in owners if self._is_unit(o)]:
            set_node(owner, "created" if ok else "error",
                     local=None if ok else "error", change_id=task.change_id)
        self._sum_up(creating if ok else owners)
        message = "" if ok else str(value.get("message") if isinstance(value, dict) else value)
        task.finish("ok" if ok else "error", "stack updated" if ok else message)

    # -- agent commands ----------------------------------------------------------
    def command_decision(self, action: Action, plan: dict[str, Any],
                         mappings: dict[str, Any]) -> tuple[str, Any]:
        owner = self._owner(action)
        unit = self._unit(action.unit)
        # a unit's own agent, or another one working for it (a farm's load balancer)
        target_name = hostname_of(unit) or hostname_of(owner) or action.unit
        key = changes.config_key(str(action.template), str(action.unit))
        digest = changes.command_digest(str(action.template), mappings)
        reason = self._reason(owner, key, unit)
        failed = self._failed_dependencies(str(action.service))
        if failed:
            service = self._service(str(action.service))
            name = str(service.get("name") if service else action.service)
            self._became([action], self.recorder.task(
                action.unit, target_name, str(action.template), reason, digest=digest,
                status="blocked", summary=f"not sent: {name} depends on {', '.join(failed)}, "
                                          f"which failed in this job"))
            self.blocked_units.add(str(action.unit))
            return "block", blocked_error(name, failed)
        recorded = changes.unchanged(owner, key, digest, self.mode)
        if recorded is not None:
            self._became([action], self.recorder.task(
                action.unit, target_name, str(action.template), "unchanged", digest=digest,
                status="planned" if self.dry_run else "skipped",
                summary=f"same inputs as change {recorded.get('changeId')}: not run again"))
            return "replay", recorded.get("result")
        task = self._became([action], self.recorder.task(
            action.unit, target_name, str(action.template), reason, digest=digest,
            status="planned" if self.dry_run else "running"))
        if self.dry_run:
            return "run", (task, owner, key, None)   # nothing is recorded: no sources
        sources = self.sources.of_command(action.where, str(action.template)) \
            if self.sources is not None else None
        self._plans[str(plan.get("ID"))] = task
        if unit is not None:
            set_node(unit, "configuring", change_id=task.change_id)
            service = self._indexed().service_of.get(id(unit))
            if service is not None and status_of(service).get("state") != "configuring":
                set_node(service, "configuring")   # its units configure: so does it
        return "run", (task, owner, key, sources)

    def command_finished(self, token: Any, action: Action, ok: bool, value: Any) -> None:
        if token is None or self.dry_run:
            return
        task, owner, key, sources = token
        unit = self._unit(action.unit)
        if not ok:
            self.failed_services.add(str(action.service))
            self.failed_units.add(str(action.unit))
            if unit is not None:
                set_node(unit, "error", local="error", change_id=task.change_id)
        elif unit is not None:
            set_node(unit, "configured", change_id=task.change_id)
        task.finish("ok" if ok else "error", result_summary(ok, value))
        self._pending_record = (task, owner, key, ok, value, sources)

    def callback_started(self, action: Action) -> None:
        """An action's ``<success>``/``<failure>`` block starts: what it marks is noted."""
        self._capture = []

    def callback_ended(self, action: Action) -> None:
        paths, self._capture = self._capture or [], None
        pending, self._pending_record = self._pending_record, None
        if pending is not None:
            task, owner, key, ok, value, sources = pending
            if owner is not None:
                # what the owner's user described, as changes.prepare reads it
                # again: a unit with its service's fields, or a service alone
                # (also when its rule sends the command to another service's unit)
                service = self._indexed().service_of.get(id(owner))
                unit = owner if service is not None else None
                service = service if service is not None else owner
                changes.record(owner, service, unit, key, task.digest or "",
                               task.change_id, changes.marks(self.model(), paths) if ok else [],
                               value, ok, self._description(service, unit), sources)

    def changed(self, path: str, base: Any = None) -> None:
        if self._capture is not None:
            self._capture.append(path)
        if self._index is not None and _structural(path):
            self._index = None
        if path.endswith(_ENDPOINT_SUFFIXES):
            owner = self._endpoint_owner(path, base)
            if owner is not None:
                endpoint_changed(owner)
        if (self._descriptions or self._topology) and not _runtime_only(
                path, base is not None and id(base) in self._indexed().objects):
            self._descriptions.clear()
            self._shared.clear()
            self._topology = None

    def log(self, plan_id: str, lines: list[str]) -> None:
        task = self._plans.get(plan_id)
        if task is not None:
            task.add_log(lines)

    # -- helpers -------------------------------------------------------------------
    def _endpoint_owner(self, path: str, base: Any) -> dict[str, Any] | None:
        """The unit or service whose ``state.<endpoint>`` ``path`` (``services.0.
        units.1.state.address``, or ``#name.state.url`` from ``base``) is."""
        owner_path = path.rsplit(".", 2)[0]
        if owner_path.startswith("#"):
            found = get_path(base, owner_path.partition(".")[2])
        else:
            found = get_path(self.model(), owner_path)
        return found if id(found) in self._indexed().objects else None

    def _sum_up(self, objects: list[dict[str, Any]]) -> None:
        """The services of these units sum them up again (node state, status)."""
        index, done = self._indexed(), set()
        for obj in objects:
            service = index.service_of.get(id(obj))
            if service is not None and id(service) not in done:
                done.add(id(service))
                summarize(service)

    def _reason(self, owner: dict | None, key: str, unit: dict | None) -> str:
        if owner is not None and str(owner.get("id")) in self.reasons:
            return self.reasons[str(owner["id"])]
        if unit is not None and local(unit, "pending") == "error":
            return "repair"
        if owner is None or key not in changes.configs(owner):
            return "new"
        return "rerun"

    def _failed_dependencies(self, service_id: str) -> list[str]:
        if not self.failed_services:
            return []
        model = self.model()
        if self._topology is None or self._topology[0] is not model:
            self._topology = (model, build(model, self.catalog))
        topology = self._topology[1]
        failed = sorted(topology.all_dependencies(service_id) & self.failed_services)
        return [str(topology.services[sid].get("name") or sid) for sid in failed]

    def _description(self, service: dict[str, Any], unit: dict[str, Any] | None) -> str:
        key = (id(service), id(unit))
        found = self._descriptions.get(key)
        if found is None:
            shared = self._shared.get(id(service))
            if shared is None:
                shared = self._shared[id(service)] = (service, changes.service_text(service))
            digest = changes.description_digest(service, unit, shared[1])
            found = self._descriptions[key] = (service, unit, digest)
        return found[2]

    def _indexed(self, fresh: bool = False) -> _ModelIndex:
        """The index of the model; ``fresh``: built again (an id it lacked)."""
        model = self.model()
        index = self._index
        if fresh or index is None or index.root is not model:
            index = self._index = _ModelIndex(model)
        return index

    def _owner(self, action: Action) -> dict[str, Any] | None:
        """The unit or service the rule that queued the action matched."""
        frame = getattr(action.blocks, "frame", None)
        cursor = getattr(frame, "cursor", None)
        known = self._indexed().objects
        while cursor is not None:
            value = cursor.value
            if isinstance(value, dict) and id(value) in known and value.get("id") is not None:
                return value
            cursor = cursor.parent
        return None

    def _is_unit(self, obj: dict[str, Any]) -> bool:
        return id(obj) in self._indexed().unit_objects

    def _service(self, service_id: str) -> dict[str, Any] | None:
        found = self._indexed().services.get(str(service_id))
        return found if found is not None else self._indexed(fresh=True).services.get(
            str(service_id))

    def _unit(self, unit_id: Any) -> dict[str, Any] | None:
        found = self._indexed().units.get(str(unit_id))
        return found if found is not None else self._indexed(fresh=True).units.get(
            str(unit_id))

    @staticmethod
    def _fragment(action: Action) -> str:
        return ", ".join(getattr(action, "resource_names", [])) or str(action.template)
