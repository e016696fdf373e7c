"""Helpers for tests of the local cloud: finding the processes of a unit, a running
``OneBox``, and a conductor frozen inside a stack step."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from waiting import wait_for


def process_state(pid: int) -> str | None:
    """The state letter of a process (``T``: stopped), None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie does not count)."""
    return process_state(pid) not in (None, "Z", "X")


def processes_with(variable: str) -> list[int]:
    """Live processes whose environment has ``NAME=value``."""
    marker = variable.encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and alive(int(entry)):
            try:
                if marker in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                    found.append(int(entry))
            except OSError:
                pass
    return found


def instance_processes(token: str) -> list[int]:
    """Live processes of a local cloud instance (they carry its token)."""
    return processes_with(f"FORNACE_INSTANCE_TOKEN={token}")


def running_onebox(state_dir: Path, max_environments: int = 2, agent_timeout: float = 60,
                   db: str | None = None, conf=None,
                   overrides: dict[str, dict[str, Any]] | None = None):
    """A started :class:`fornace.cli.onebox.OneBox` on ``state_dir`` (folder broker and
    SQLite unless ``conf``/``db`` say otherwise; ``overrides``: group -> option ->
    value, set on the configuration), for ``yield from`` in a fixture:
    stopped at the end, and every local-cloud stack deleted (which stops every
    process of the units) even when the test failed."""
    from fornace.cli.main import build_conf
    from fornace.cli.onebox import OneBox

    if conf is None:
        conf = build_conf()
        conf(["up"], project="fornace", default_config_files=[], default_config_dirs=[])
    conf.set_override("state_dir", str(state_dir), group="api")
    conf.set_override("agent_timeout", agent_timeout, group="engine")
    for group, options in (overrides or {}).items():
        for name, value in options.items():
            conf.set_override(name, value, group=group)
    onebox = OneBox(conf, host="127.0.0.1", port=0, db=db, max_environments=max_environments)
    onebox.start()
    try:
        yield onebox
    finally:
        onebox.stop()
        for stack in onebox.cloud.stack_names():
            onebox.cloud.delete(stack)


# A conductor's stack step frozen half-way: the local cloud of [conductor]
# cloud_dir and lock_stale_after applies a template to a stack and stops itself
# (SIGSTOP) just after it started the first new instance, before it records
# that instance's pid; once continued, what its next step does is reported by
# its exit: 0 done, 3 refused (the StackFailure's message on stderr).
_FROZEN_HOLDER = r"""
import json, os, signal, sys
from fornace.cli.main import build_conf
from fornace.conductor.executors import processes
from fornace.conductor.executors.base import StackFailure, StackRequest
from fornace.conductor.executors.localcloud import LocalStacks

cloud, lease_time, stack, template = sys.argv[1:5]
conf = build_conf()
conf(["conductor", "--stacks", "local"], project="fornace", prog="fornace",
     default_config_files=[], default_config_dirs=[])
conf.set_override("cloud_dir", cloud, group="conductor")
conf.set_override("lock_stale_after", float(lease_time), group="conductor")
real_start, real_stat = processes.start, processes.stat

def stat_then_freeze(pid):
    processes.stat = real_stat
    os.kill(os.getpid(), signal.SIGSTOP)
    return real_stat(pid)

def start_then_arm(*args, **kwargs):   # the first look after the first start freezes
    processes.start = real_start
    started = real_start(*args, **kwargs)
    processes.stat = stat_then_freeze
    return started

processes.start = start_then_arm
try:
    LocalStacks.factory(conf)(None).apply(StackRequest(stack, json.loads(template), {}))
except StackFailure as exc:
    print(exc.message, file=sys.stderr)
    sys.exit(3)
"""


def frozen_holder(cloud_dir: Path, lease_time: float, stack: str,
                  template: dict) -> subprocess.Popen:
    """A :class:`subprocess.Popen` of a conductor frozen inside a stack step of the
    local cloud in ``cloud_dir`` (see ``_FROZEN_HOLDER``), once it is stopped.
    The caller continues or kills it in a ``finally`` (:func:`end_holder`)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _FROZEN_HOLDER, str(cloud_dir), str(lease_time), stack,
         json.dumps(template)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: process_state(holder.pid) == "T" or holder.poll() is not None,
                 "the holder to stop itself in its stack step", timeout=60)
    except BaseException:
        end_holder(holder)
        raise
    if holder.poll() is not None:
        raise AssertionError(f"the holder ended (code {holder.returncode}) instead of "
                             f"stopping: {holder.stderr.read()}")
    return holder


def end_holder(holder: subprocess.Popen) -> None:
    """Kill a holder whatever its state (stopped or not)."""
    if holder.poll() is None:
        holder.kill()
        with contextlib.suppress(ProcessLookupError):
            os.kill(holder.pid, signal.SIGCONT)
    holder.wait()
    holder.stdout.close()
    holder.stderr.close()
