"""One deployment: the workflow loop of Murano 0.2 over one object model.

Round after round: run every workflow (files in sorted order) until none
changes the model (the fixpoint), run the pending actions through the
executors, reset the automatic mutes, and start again -- until no action is
pending or ``<stop/>`` was called.  Then ``token`` and every ``temp`` key are
removed and the model is returned.

Nothing that happens inside a rule may kill the process or lose the model:
an exception becomes an error report and a clean end of the deployment, and
a workflow that never converges is stopped by the pass and round limits with
a report naming the rules that kept firing, and one whose data grows past the
``[engine]`` limits (:mod:`fornace.conductor.dsl.limits`) by a report naming the
rule that wrote too much.
"""
from __future__ import annotations

import collections
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from fornace.common.contract import clean_model
from fornace.common.cursor import Cursor, get_path
from fornace.common.errors import FornaceError
from fornace.common.modelview import iter_units, unit_labels
from fornace.common.secrets import find_secrets, mask_text, masked
from fornace.conductor.dispatch import ActionRunner, NullHooks
from fornace.conductor.dsl.engine import Evaluator
from fornace.conductor.dsl.hostnames import HostnameGenerator, model_hostnames
from fornace.conductor.dsl.limits import DataLimitError, Limits, ModelBudget
from fornace.conductor.dsl.pending import Action
from fornace.conductor.dsl.query import Query
from fornace.conductor.dsl.scope import Frame
from fornace.conductor.dsl.trace import NullTrace
from fornace.conductor.dsl.workflows import Workflow
from fornace.conductor.dsl.xmlload import Node
from fornace.conductor.executors.base import AgentExecutor, StackExecutor
from fornace.conductor.gcpolicy import relaxed_collection
from fornace.conductor.templates import TemplateStore

LOG = logging.getLogger(__name__)

Reporter = Callable[[dict[str, Any]], None]

DEFAULT_BROKER = {"host": "127.0.0.1", "port": 5672, "login": "guest", "password": "guest",
                  "virtual_host": "/", "ssl": False, "server_address": "127.0.0.1"}


@dataclass
class Settings:
    max_rounds: int = 100
    max_passes: int = 100_000
    agent_timeout: float | None = None  # seconds; None waits without limit (0.2)
    agent_absent_after: float | None = 30.0  # a listening agent that stopped: gone (s)
    agent_boot_timeout: float | None = 600.0  # an agent never seen listening: none (s)
    config: Mapping[str, Any] = field(default_factory=dict)  # what ##name reads
    broker: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_BROKER))
    limits: Limits = field(default_factory=Limits)


@dataclass
class Outcome:
    model: dict[str, Any]
    status: str  # "success", "stopped" or "error"
    rounds: int
    reports: list[dict[str, Any]]


class Session:
    def __init__(self, model: dict[str, Any], workflows: list[Workflow], store: TemplateStore,
                 stacks: StackExecutor, agents: AgentExecutor,
                 settings: Settings | None = None, reporter: Reporter | None = None,
                 trace: Any = None, plan_seed: str | None = None,
                 hooks: Any = None, secret_keys: frozenset[str] = frozenset()) -> None:
        """``plan_seed``: see :class:`fornace.conductor.plans.PlanIds` (the task id);
        ``secret_keys``: the field names secret besides those named like passwords
        (those the catalog's types declare, :func:`fornace.common.catalog.declared_secrets`):
        their values are masked in the reports and the trace."""
        if not isinstance(model, dict):
            raise FornaceError("the object model must be a JSON object")
        self.model = model
        self.workflows = workflows
        self.store = store
        self.settings = settings or Settings()
        self.reporter = reporter
        self.trace = trace or NullTrace()
        self.environment_id = str(model.get("id", ""))
        self.secrets = find_secrets(model, keys=secret_keys)
        broker_password = self.settings.broker.get("password")
        if isinstance(broker_password, str) and broker_password:
            self.secrets.add(broker_password)
        if hasattr(self.trace, "secrets"):
            self.trace.secrets |= self.secrets
        self.side_effects = False
        self.deferred_values = False  # set once a <function> value exists
        self.auto_mutes: set[tuple] = set()
        self.permanent_mutes: set[tuple] = set()
        self.pending: list[Action] = []
        self._root_queries: dict[Query, list[Cursor]] = {}
        self.reports: list[dict[str, Any]] = []
        self.hostnames = HostnameGenerator(lambda: model_hostnames(self.model))
        self.agent_timeout = self.settings.agent_timeout
        self._firing: collections.Counter[str] = collections.Counter()
        self.budget = ModelBudget(self.settings.limits)
        # strings at least this long are checked by the budget (shorter ones always fit)
        self.long_string = self.settings.limits.max_value_bytes - 2
        self._evaluator = Evaluator(self)
        self.hooks = hooks or NullHooks()
        self._runner = ActionRunner(store, stacks, agents, f"e{self.environment_id}",
                                    self._unit_labels, lambda: self.stop_requested, self.trace,
                                    plan_seed, self.hooks)

    # -- used by DSL functions (dsl.context.EvaluationContext) -------------
    @property
    def stop_requested(self) -> bool:
        """A workflow's <stop/>, or the job halted from outside (its lock was lost)."""
        temp = self.model.get("temp")
        return (isinstance(temp, dict) and bool(temp.get("_stop_requested"))) \
            or self.hooks.halted() is not None

    def request_stop(self) -> None:
        temp = self.model.get("temp")
        if not isinstance(temp, dict):
            temp = self.model["temp"] = {}
        temp["_stop_requested"] = True
        self._root_queries.clear()

    def find(self, query: Query, cursor: Cursor) -> list[Cursor]:
        """Run a query; whole-model results are reused until the model changes.

        Rules often search the whole model once per matched object (a unit
        looking for its domain controller); without this, that costs units x
        services filter evaluations per pass.
        """
        start = query.start(cursor)
        if start.value is not self.model:  # below the root, or a context variable
            return query.find_from(start)
        found = self._root_queries.get(query)
        if found is None:
            found = self._root_queries[query] = query.find_from(start)
        return found

    def is_muted(self, key: tuple) -> bool:
        return key in self.auto_mutes or key in self.permanent_mutes

    def admit(self, rule_id: str, value: Any, depth: int, forbidden: Any,
              target: Callable[[], str]) -> int:
        """The size of a value a rule is about to write (:class:`ModelBudget`)."""
        return self.budget.admit(value, depth, forbidden,
                                 f"rule {rule_id!r}" if rule_id else "(top level)", target)

    def changed(self, rule_id: str, node: Node, path: str, value: Any, size: int = 8,
                known_depth: bool = True, base: Any = None) -> None:
        """The model changed at ``path``; ``size``: the value's (:meth:`admit`);
        ``base``: the object a ``#name.`` path starts at (a context variable's)."""
        self.side_effects = True
        self._root_queries.clear()
        who = f"{rule_id or '(top level)'} at {node.where}"
        self._firing[who] += 1
        self.trace.changed(rule_id, node.where, path, value)
        self.hooks.changed(path, base)
        budget = self.budget   # its bookkeeping inline: this runs for every change
        size += len(path)   # about the key(s) the write may add
        budget.growth[who] += size
        budget.written += size
        if budget.written > budget.slack or not known_depth or type(value) is dict \
                or type(value) is list:
            budget.wrote(type(value) is dict or type(value) is list, known_depth)

    def queue(self, action: Action) -> None:
        self.pending.append(action)
        self._firing[f"{action.rule_id or '(top level)'} at {action.where}"] += 1
        self.trace.action_queued(action)

    def report(self, entity: Any, id: Any, text: str, level: str, details: Any) -> None:
        if self.secrets and any(secret in text for secret in self.secrets):
            text = mask_text(text, self.secrets)
        body = {"id": id, "entity": entity, "text": text,
                "details": masked(details, self.secrets), "level": level,
                "environment_id": self.environment_id}
        self.reports.append(body)
        self.trace.reported(body)
        if self.reporter is not None:
            try:
                self.reporter(body)
            except Exception as exc:  # a lost report must not end the deployment
                LOG.warning("environment %s: could not send report %r: %s",
                            self.environment_id, body["text"], exc)

    def config_value(self, key: str) -> Any:
        config = self.settings.config
        if key in config:
            return config[key]
        return get_path(config, key) if "." in key else None

    def broker_settings(self) -> dict[str, Any]:
        return {**DEFAULT_BROKER, **self.settings.broker}

    # -- the loop ----------------------------------------------------------
    def run(self) -> Outcome:
        with relaxed_collection():
            return self._run()

    def _run(self) -> Outcome:
        status = "success"
        rounds = 0
        try:
            self.budget.start(self.model)
            while True:
                rounds += 1
                self.trace.round_started(rounds)
                self.auto_mutes.clear()
                self._firing.clear()
                self._fixpoint()
                self.budget.settle(end_of_round=True)
                if self.stop_requested or not self.pending:
                    break
                if rounds > self.settings.max_rounds:  # only when work is really left
                    self._not_converging(f"still had actions to run after "
                                         f"{self.settings.max_rounds} rounds")
                actions, self.pending = self.pending, []
                self._runner.run(actions)
                if self.stop_requested:
                    self.budget.settle(end_of_round=True)   # what the callbacks wrote
                    break
        except _NotConverging:
            status = "error"
        except DataLimitError as exc:
            status = "error"
            self._error(f"Deployment stopped: {exc}")
        except FornaceError as exc:
            status = "error"
            self._error(f"Deployment stopped by a workflow error: {exc}")
        except Exception as exc:  # never lose the model to a bug
            status = "error"
            self._error(f"Deployment stopped by an internal error: {type(exc).__name__}: {exc}")
        self._runner.cancel(self.pending)  # queued, but stopped or failed before running
        if status == "success" and self.stop_requested:
            status = "stopped"
        return Outcome(clean_model(self.model), status, rounds, self.reports)

    def _fixpoint(self) -> None:
        root = Cursor(self.model)
        passes = 0
        while True:
            self.trace.pass_started(passes + 1)
            changed = False
            for workflow in self.workflows:  # each run in a fresh context, as in 0.2
                if self._evaluator.call(workflow.root, Frame(cursor=root)):
                    changed = True
                if self.stop_requested:
                    return
            self.budget.settle(end_of_round=False)
            if not changed:
                return
            passes += 1
            if passes >= self.settings.max_passes:
                self._not_converging(f"did not reach a fixpoint after {passes} passes")

    def _not_converging(self, what: str) -> None:
        busiest = ", ".join(name for name, _ in self._firing.most_common(10)) or "none"
        self._error(f"Workflow does not converge: it {what}; rules that kept firing: {busiest}")
        raise _NotConverging()

    def _error(self, text: str) -> None:
        self.report(entity="environment", id=self.environment_id or None, text=text,
                    level="error", details=None)

    def _unit_labels(self) -> dict[str, frozenset[str]]:
        return {str(unit["id"]): unit_labels(unit) for _, unit in iter_units(self.model)}


class _NotConverging(Exception):
    """Raised after the non-convergence report has been sent."""
