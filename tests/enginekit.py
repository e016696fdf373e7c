"""Shared helpers for the engine tests (imported by name: ``from enginekit import ...``;
the fixtures are in conftest.py).

``catalog`` is a temporary catalog folder laid out like Murano 0.2's
``data/`` (``workflows/*.xml``, ``templates/cf``, ``templates/agent`` …);
tests write small workflows and templates into it and run a model through
the whole session loop against the simulated cloud.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fornace.common.cursor import Cursor
from fornace.conductor.dsl.engine import Evaluator, bind
from fornace.conductor.dsl.scope import Frame
from fornace.conductor.dsl.trace import RecordingTrace
from fornace.conductor.dsl.xmlload import parse_bytes
from fornace.conductor.executors.base import AgentExecutor, PlanReply, PlanRequest, StackRequest
from fornace.conductor.executors.simulator import SimulatedCloud, SimulatedStacks
from fornace.conductor.session import Outcome, Session, Settings
from fornace.conductor.templates import TemplateStore
from fornace.conductor.workflowfiles import load_workflows


def sample_model() -> dict[str, Any]:
    """Two services, three units; ids with upper case on purpose."""
    return {
        "id": "ENV1", "name": "MyDataCenter", "token": "tok-0123456789",
        "services": [
            {"id": "SvcA", "name": "web", "type": "webServer", "domain": "acme.loc",
             "adminPassword": "S3cr3t!Pass", "osImage": {"name": "ws-2012-std"},
             "units": [{"id": "uA1", "name": "web_instance_1", "isMaster": True},
                       {"id": "uA2", "name": "web_instance_2"}]},
            {"id": "SvcB", "name": "db", "type": "msSqlServer",
             "units": [{"id": "uB1", "name": "db_instance_1"}]},
        ],
    }


class RecordingStacks(SimulatedStacks):
    """The simulated Heat side, also keeping every request and call order."""

    def __init__(self, cloud: SimulatedCloud, log: list | None = None) -> None:
        super().__init__(cloud)
        self.requests: list[StackRequest] = []
        self.deleted: list[str] = []
        self.log = log if log is not None else []

    def apply(self, request: StackRequest) -> dict[str, Any]:
        self.requests.append(copy.deepcopy(request))
        self.log.append(("heat", [s.template for s in request.sources]))
        return super().apply(request)

    def delete(self, stack_name: str) -> None:
        self.deleted.append(stack_name)
        self.log.append(("delete", stack_name))
        super().delete(stack_name)


class ScriptedAgents(AgentExecutor):
    """An agent side answering with given raw 0.2 result documents."""

    def __init__(self, replies: dict[str, Any], log: list | None = None) -> None:
        self.replies = replies  # template -> result document, or an exception
        self.plans: list[PlanRequest] = []
        self.log = log if log is not None else []

    def run(self, requests: list[PlanRequest]) -> list[PlanReply]:
        self.plans.extend(requests)
        self.log.extend(("agent", r.template) for r in requests)
        out = []
        for request in requests:
            reply = self.replies[request.template]
            if isinstance(reply, Exception):
                raise reply
            out.append(PlanReply(copy.deepcopy(reply)))
        return out


@dataclass
class Run:
    outcome: Outcome
    trace: RecordingTrace
    stacks: Any
    agents: Any
    reported: list = field(default_factory=list)  # what the reporter callback got

    @property
    def model(self) -> dict[str, Any]:
        return self.outcome.model

    @property
    def status(self) -> str:
        return self.outcome.status

    @property
    def reports(self) -> list[dict[str, Any]]:
        return self.outcome.reports

    def texts(self, level: str | None = None) -> list[str]:
        return [r["text"] for r in self.reports if level is None or r["level"] == level]

    @property
    def errors(self) -> list[str]:
        return self.texts("error")

    def unit(self, unit_id: str) -> dict[str, Any]:
        for service in self.model.get("services") or []:
            for unit in service.get("units") or []:
                if unit.get("id") == unit_id:
                    return unit
        raise KeyError(unit_id)

    def hits(self, rule_id: str, round: int | None = None) -> list[Any]:
        """Ids (or paths, for objects without id) a rule matched."""
        found = []
        for entry in self.trace.rounds:
            if round is not None and entry["round"] != round:
                continue
            for hit in entry["rules"]:
                if hit["rule"] == rule_id:
                    found.append(hit["id"] if hit["id"] is not None else hit["object"])
        return found

    def actions(self, round: int | None = None) -> list[dict[str, Any]]:
        return [a for entry in self.trace.rounds
                if round is None or entry["round"] == round for a in entry["actions"]]


class Catalog:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.workflows = root / "workflows"
        self.workflows.mkdir(parents=True)
        (root / "templates" / "cf").mkdir(parents=True)
        (root / "templates" / "agent" / "scripts").mkdir(parents=True)

    # -- writing the catalog ----------------------------------------------
    def workflow(self, xml: str, name: str = "main.xml") -> Path:
        path = self.workflows / name
        path.write_text(xml, encoding="utf-8")
        return path

    def rules(self, body: str, name: str = "main.xml") -> Path:
        """A workflow file: ``<workflow>`` on line 1, ``body`` from line 2."""
        return self.workflow(f"<workflow>\n{body}\n</workflow>\n", name)

    def heat(self, name: str, template: dict[str, Any]) -> Path:
        return self.file(f"templates/cf/{name}.template", json.dumps(template))

    def agent(self, name: str, commands: list | None = None, scripts: tuple = (),
              reboot: int = 0, **extra: Any) -> Path:
        plan = {"Scripts": list(scripts),
                "Commands": commands if commands is not None else [
                    {"Name": name, "Arguments": {}}],
                "RebootOnCompletion": reboot, **extra}
        return self.file(f"templates/agent/{name}.template", json.dumps(plan))

    def script(self, name: str, text: str) -> Path:
        return self.file(f"templates/agent/scripts/{name}", text)

    def file(self, relative: str, text: str) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def store(self, fallback: Path | None = None) -> TemplateStore:
        return TemplateStore(self.root, fallback=fallback)

    @staticmethod
    def line_of(path: Path, needle: str) -> int:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if needle in line:
                return number
        raise AssertionError(f"{needle!r} not in {path}")

    # -- running ----------------------------------------------------------
    def run(self, model: dict[str, Any] | None = None, *, cloud: SimulatedCloud | None = None,
            stacks: Any = None, agents: Any = None, fallback: Path | None = None,
            log: list | None = None, **settings: Any) -> Run:
        cloud = cloud or SimulatedCloud()
        default_stacks, default_agents = cloud.executors()
        if stacks is None:
            stacks = RecordingStacks(cloud, log)
        agents = agents or default_agents
        trace = RecordingTrace()
        reported: list = []
        model = sample_model() if model is None else model
        session = Session(model, load_workflows(self.workflows), self.store(fallback),
                          stacks, agents, Settings(**settings), reporter=reported.append,
                          trace=trace)
        return Run(session.run(), trace, stacks, agents, reported)

    def capture(self, fragment: str, model: dict[str, Any] | None = None, **settings: Any):
        """Evaluate ``fragment`` as the content of a ``<set>`` at the model root."""
        self.rules(f'<rule id="cap" match="$"><set path="out">{fragment}</set></rule>')
        run = self.run(model if model is not None else {"id": "E"}, **settings)
        assert run.status == "success", run.reports
        assert "out" in run.model, "the set did not happen"
        return run.model["out"]


def evaluate(xml: str, model: dict[str, Any] | None = None, *, config: dict | None = None,
             store: TemplateStore | None = None):
    """Evaluate one DSL element directly, its cursor at the model root."""
    node = parse_bytes(xml.encode(), "inline.xml")
    bind(node)
    cloud = SimulatedCloud()
    stacks, agents = cloud.executors()
    session = Session(model if model is not None else {"id": "E"},
                      [], store or TemplateStore("/nonexistent", fallback=None), stacks, agents,
                      Settings(config=config or {}))
    return Evaluator(session).call(node, Frame(cursor=Cursor(session.model)))


def send_command(template: str, *, body: str = "", result: str | None = None,
                 error: str | None = None, mappings: str = "", extra: str = "") -> str:
    """A ``<send-command>`` to the unit at the cursor (cursor = a unit)."""
    attrs = f' template="{template}"'
    if result:
        attrs += f' result="{result}"'
    if error:
        attrs += f' error="{error}"'
    mapping = f'<parameter name="mappings">{mappings}</parameter>' if mappings else ""
    return (f'<send-command{attrs}{extra}>'
            f'<parameter name="unit"><select path="id"/></parameter>'
            f'<parameter name="service"><select path="::id"/></parameter>'
            f'{mapping}{body}</send-command>')


UNITS = "$.services[*].units[*]"
