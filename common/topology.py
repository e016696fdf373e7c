"""The dependency graph of an environment.

Units are the hosts (compute nodes) their service is contained in.  A
service depends on another when one of its fields refers to it (the
catalog's ``references``: ``domain`` -> the activeDirectory service whose
``domain`` is that domain) or when it lists it in ``dependsOn``.  Install goes
by :meth:`Topology.levels`, uninstall by the same levels reversed; services
on one level do not depend on each other and run in parallel.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fornace.common.catalog import Catalog
from fornace.common.errors import FornaceError
from fornace.common.modelview import service_type, services_of


class TopologyError(FornaceError):
    """A dependency on a missing service, or a dependency cycle."""


@dataclass
class Edge:
    source: str   # the dependent service (or unit, for contained_in)
    target: str   # what it depends on
    kind: str     # "depends_on" or "contained_in"
    reason: str   # the field that made it ("domain", "dependsOn") or "unit"


@dataclass
class Topology:
    services: dict[str, dict[str, Any]]          # id -> service object
    units: dict[str, str]                        # unit id -> service id
    edges: list[Edge] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # depends_on edges by source and by target, with the edge count they were built at
    _by_edges: Any = field(default=None, init=False, repr=False, compare=False)

    def depends_on(self, service_id: str) -> set[str]:
        """Services ``service_id`` depends on directly."""
        return set(self._adjacency()[0].get(service_id, ()))

    def dependents(self, service_id: str) -> set[str]:
        """Services that depend on ``service_id`` directly."""
        return set(self._adjacency()[1].get(service_id, ()))

    def _adjacency(self) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
        """``depends_on`` edges by source and by target, built again when the
        edges changed (one pass instead of one per service)."""
        cached = self._by_edges
        if cached is not None and cached[0] == len(self.edges):
            return cached[1], cached[2]
        sources: dict[str, set[str]] = {}
        targets: dict[str, set[str]] = {}
        for edge in self.edges:
            if edge.kind == "depends_on":
                sources.setdefault(edge.source, set()).add(edge.target)
                targets.setdefault(edge.target, set()).add(edge.source)
        self._by_edges = (len(self.edges), sources, targets)
        return sources, targets

    def all_dependencies(self, service_id: str) -> set[str]:
        return _closure(service_id, self.depends_on)

    def all_dependents(self, service_id: str) -> set[str]:
        return _closure(service_id, self.dependents)

    def levels(self) -> list[list[str]]:
        """Services in install order: each level depends only on earlier ones."""
        remaining = {sid: self.depends_on(sid) & set(self.services) for sid in self.services}
        order: list[list[str]] = []
        while remaining:
            ready = sorted(sid for sid, deps in remaining.items() if not deps)
            if not ready:
                cycle = " -> ".join(_cycle(remaining))
                raise TopologyError(f"services depend on each other in a cycle: {cycle}")
            order.append(ready)
            for sid in ready:
                del remaining[sid]
            for deps in remaining.values():
                deps.difference_update(ready)
        return order

    def view(self) -> dict[str, Any]:
        """What ``GET .../topology`` returns."""
        nodes = []
        for sid, service in self.services.items():
            nodes.append({"id": sid, "kind": "service", "name": service.get("name"),
                          "type": service_type(service)})
            for unit in service.get("units") or []:
                if isinstance(unit, dict) and unit.get("id") is not None:
                    state = unit.get("state") if isinstance(unit.get("state"), dict) else {}
                    nodes.append({"id": unit["id"], "kind": "unit", "name": unit.get("name"),
                                  "type": "host", "service": sid,
                                  "hostname": state.get("hostname")})
        try:
            levels = self.levels()
        except TopologyError as exc:
            levels, problems = [], [*self.problems, str(exc)]
        else:
            problems = list(self.problems)
        return {"nodes": nodes,
                "edges": [{"source": e.source, "target": e.target, "kind": e.kind,
                           "reason": e.reason} for e in self.edges],
                "levels": levels, "problems": problems}


def build(model: dict[str, Any], catalog: Catalog | None = None) -> Topology:
    """The topology of an object model; unknown targets become ``problems``."""
    services = {str(s["id"]): s for s in services_of(model)}
    topology = Topology(services=services, units={})
    for sid, service in services.items():
        for unit in service.get("units") or []:
            if isinstance(unit, dict) and unit.get("id") is not None:
                topology.units[str(unit["id"])] = sid
                topology.edges.append(Edge(str(unit["id"]), sid, "contained_in", "unit"))
    for sid, service in services.items():
        for target, reason in _dependencies(service, services, catalog, topology.problems):
            if target != sid:
                topology.edges.append(Edge(sid, target, "depends_on", reason))
    return topology


def _dependencies(service: dict, services: dict[str, dict], catalog: Catalog | None,
                  problems: list[str]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    name = service.get("name") or service.get("id")
    depends = service.get("dependsOn") or []
    if not isinstance(depends, list):
        problems.append(f"service {name}: dependsOn must be a list of service ids")
        depends = []
    for target in depends:
        if str(target) in services:
            found.append((str(target), "dependsOn"))
        else:
            problems.append(f"service {name}: dependsOn names no service of the "
                            f"environment: {target!r}")
    type_name = service_type(service)
    if catalog is None or not catalog.known(type_name):
        return found
    for field_name, ref in catalog.references(type_name).items():
        value = service.get(field_name)
        if value in (None, ""):
            continue
        targets = [sid for sid, other in services.items()
                   if catalog.is_a(service_type(other), ref["type"]) and _same(other.get(ref["key"]), value)]
        if targets:
            found.extend((sid, field_name) for sid in targets)
        else:
            problems.append(f"service {name}: {field_name} {value!r} names no "
                            f"{ref['type']} service of the environment")
    return found


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()   # domain names
    return a == b


def _closure(start: str, step) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in step(todo.pop()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    seen.discard(start)
    return seen


def _cycle(remaining: dict[str, set[str]]) -> list[str]:
    start = sorted(remaining)[0]
    path = [start]
    current = start
    while True:
        current = sorted(remaining[current])[0]
        if current in path:
            return path[path.index(current):] + [current]
        path.append(current)
