"""Hold points: where a test stops a real agent process at one exact step.

A test that must kill an agent at a precise moment (say, a plan's commands
are over but its answer is not sent) cannot rely on timing.  It starts the
agent with ``FORNACE_AGENT_HOLD=<file>`` in its environment and writes the
name of a hold point into that file.  The agent, reaching that point, writes
``<file>.reached`` (the plan id) and waits as long as ``<file>`` exists: the
test kills it there, or removes ``<file>`` to let it go on.  Without the
variable (always, outside tests) a hold point costs one dictionary lookup.
"""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

LOG = logging.getLogger(__name__)

HOLD_VARIABLE = "FORNACE_AGENT_HOLD"
COMMANDS_ENDED = "commands-ended"   # a plan's commands are over; its answer is not sent
POLL = 0.05                          # seconds between two looks at the hold file


def hold(point: str, plan_id: str | None) -> None:
    """Wait here while the hold file asks for ``point`` (see the module docstring)."""
    path = os.environ.get(HOLD_VARIABLE)
    if not path:
        return
    armed = Path(path)
    try:
        if armed.read_text(encoding="utf-8").strip() != point:
            return
    except OSError:
        return
    reached = armed.with_name(armed.name + ".reached")
    partial = reached.with_name(reached.name + ".partial")
    partial.write_text(plan_id or "", encoding="utf-8")
    os.replace(partial, reached)
    LOG.warning("hold point %s reached (plan %s): waiting while %s exists", point, plan_id,
                armed)
    tick = threading.Event()      # nobody sets it: an interruptible pause
    while armed.exists():
        tick.wait(POLL)
