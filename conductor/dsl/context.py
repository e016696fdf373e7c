"""What the DSL asks of the world around it, as protocols.

The evaluator runs the functions of a workflow for one deployment; what they
read and change outside their arguments (the model, mutes, the queue of
pending actions, reports, configuration, templates) they reach through an
:class:`EvaluationContext`.  ``fornace.conductor.session.Session`` is the
one the conductor gives; tests may give their own.  The workflow checker
looks templates up through :class:`Templates` (a catalog folder's
``TemplateStore`` is one).  Nothing here imports from outside the DSL.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    from fornace.common.cursor import Cursor
    from fornace.conductor.dsl.hostnames import HostnameGenerator
    from fornace.conductor.dsl.pending import Action
    from fornace.conductor.dsl.query import Query
    from fornace.conductor.dsl.xmlload import Node


@runtime_checkable
class Templates(Protocol):
    """The templates a workflow names (``template=``), by name; a missing or bad
    one raises a ``LocatedError`` saying why."""

    def heat_template(self, name: str, mappings: dict[str, Any] | None = None) -> dict:
        """A Heat template fragment, ``$name`` strings replaced by ``mappings``."""

    def agent_template(self, name: str, mappings: dict[str, Any] | None = None) -> dict:
        """An execution plan, ``$name`` strings replaced by ``mappings``."""

    def script(self, name: str) -> bytes:
        """A script an execution plan names."""

    def agent_config(self, name: str) -> str:
        """An agent configuration for user data (``<prepare-user-data>``)."""

    def init_script(self, name: str) -> str:
        """An instance boot script for user data."""


class RuleTrace(Protocol):
    """Where a deployment's rule matches are recorded (``NullTrace``: nowhere)."""

    def rule_matched(self, node: Node, rule_id: str, cursor: Cursor,
                     query: Query | None = None) -> None:
        """``rule_id`` (the element ``node``) matched the object at ``cursor``
        (found by ``query``: what its filters read is the match's cause)."""


@runtime_checkable
class EvaluationContext(Protocol):
    """One deployment as the DSL functions see it."""

    model: dict[str, Any]
    side_effects: bool          # the current workflow changed the model (this pass)
    deferred_values: bool       # a <function> value exists: <set> must resolve values
    auto_mutes: set[tuple]      # mutes of this round
    permanent_mutes: set[tuple]
    long_string: int            # strings at least this long are measured by admit()
    agent_timeout: float | None
    hostnames: HostnameGenerator
    store: Templates
    trace: RuleTrace

    @property
    def stop_requested(self) -> bool:
        """``<stop/>`` was called, or the deployment is halted from outside."""

    def request_stop(self) -> None:
        """``<stop/>``: end the deployment after this pass."""

    def find(self, query: Query, cursor: Cursor) -> list[Cursor]:
        """The objects ``query`` finds from ``cursor``."""

    def is_muted(self, key: tuple) -> bool:
        """Whether a rule is muted on an object (``key``)."""

    def admit(self, rule_id: str, value: Any, depth: int, forbidden: Any,
              target: Callable[[], str]) -> int:
        """The size of a value a rule is about to write; raises when it may not."""

    def changed(self, rule_id: str, node: Node, path: str, value: Any, size: int = 8,
                known_depth: bool = True, base: Any = None) -> None:
        """The model changed at ``path`` (after :meth:`admit`)."""

    def queue(self, action: Action) -> None:
        """An action to run after the fixpoint."""

    def report(self, entity: Any, id: Any, text: str, level: str, details: Any) -> None:
        """A report (``<report>``) for the environment's owner."""

    def config_value(self, key: str) -> Any:
        """What ``##key`` reads (configuration)."""

    def broker_settings(self) -> Mapping[str, Any]:
        """How agents reach the broker (``<prepare-user-data>``)."""
