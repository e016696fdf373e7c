"""What the workflow loop asks of the cloud: one interface (``base``), one module
per backend, and this table, the only place that names them.

The conductor knows stack backends by name (``[conductor] stacks``,
``fornace conductor --stacks``); a backend module is imported only when its
name is chosen.
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


def stacks_class(name: str) -> type[StackExecutor]:
    """The stack backend called ``name`` (a key of :data:`STACKS`)."""
    try:
        module, _, attribute = STACKS[name].partition(":")
    except KeyError:
        raise ValueError(f"unknown stack backend {name!r} (one of {', '.join(STACKS)})") from None
    return getattr(importlib.import_module(module), attribute)


def stacks_factory(name: str, conf: Any) -> Callable[[Any], StackExecutor]:
    """``task -> StackExecutor`` for the backend ``name``, built from ``conf``."""
    return stacks_class(name).factory(conf)
