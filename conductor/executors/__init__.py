"""What the workflow loop asks of the cloud: one interface (``base``), one module
per backend, and this table, the only place that names them.  Beside them:
``cfn``, the template surgery every stack backend shares, and the local
cloud's parts, ``cfnfunctions`` (what it evaluates of a template),
``processes`` (its /proc supervisor) and ``leases`` (who may change a stack).  Nothing here imports from the floors
above (see ``fornace.conductor``): a backend is handed what it needs (its
configuration, the request).

The conductor knows stack backends by name (``[conductor] stacks``,
``fornace conductor --stacks``) and agent backends likewise (``[conductor]
agents``, ``--agents``: the real agents over the broker, or a simulated fleet
that answers every plan); a backend module is imported only when its name is
chosen.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from fornace.conductor.executors.base import StackExecutor

# name -> "module:class" of a StackExecutor
STACKS = {
    "simulator": "fornace.conductor.executors.simulator:SimulatedStacks",
    "heat": "fornace.conductor.executors.heat:HeatStacks",
    "local": "fornace.conductor.executors.localcloud:LocalStacks",
}


# name -> "module:class" of an AgentExecutor with a ``for_job(JobAgents)`` classmethod
AGENTS = {
    "amqp": "fornace.conductor.executors.agents:AmqpAgents",
    "simulator": "fornace.conductor.executors.simulator:SimulatedAgents",
}


def _named(table: dict[str, str], kind: str, name: str) -> Any:
    try:
        module, _, attribute = table[name].partition(":")
    except KeyError:
        raise ValueError(f"unknown {kind} backend {name!r} (one of {', '.join(table)})") \
            from None
    return getattr(importlib.import_module(module), attribute)


def agents_class(name: str) -> Any:
    """The agent backend called ``name`` (a key of :data:`AGENTS`)."""
    return _named(AGENTS, "agent", name)


def stacks_class(name: str) -> type[StackExecutor]:
    """The stack backend called ``name`` (a key of :data:`STACKS`)."""
    return _named(STACKS, "stack", name)


def stacks_factory(name: str, conf: Any) -> Callable[[Any], StackExecutor]:
    """``task -> StackExecutor`` for the backend ``name``, built from ``conf``."""
    return stacks_class(name).factory(conf)
