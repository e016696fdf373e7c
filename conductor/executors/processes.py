"""The processes of local "VMs", supervised through /proc.

An instance's processes are its boot process's group and every process
carrying its ``FORNACE_INSTANCE_TOKEN`` in its environment (commands its
agent runs start sessions of their own, and servers they leave behind
belong to the instance too).  :func:`start` starts a boot process in a
session of its own and keeps it to reap it; :func:`running` says whether a
recorded process (pid and /proc start time, so a reused pid is not taken for
it) still runs; :func:`stop_instances` stops every process of some
instances: SIGTERM to all at once, SIGKILL to what is left after a timeout,
each only while a fence allows it (the local cloud's stack lease is still its
caller's).
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any, Callable, ContextManager

LOG = logging.getLogger(__name__)

TOKEN_VARIABLE = "FORNACE_INSTANCE_TOKEN"   # marks every process of an instance

_children: dict[int, subprocess.Popen] = {}   # pid -> Popen, to reap our own children
_children_lock = threading.Lock()


def start(argv: list[str], cwd: Path, log: IO[bytes], env: dict[str, str]) -> subprocess.Popen:
    """Start a boot process in a new session (its own process group), output to ``log``."""
    process = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                               stderr=subprocess.STDOUT, env=env, start_new_session=True,
                               close_fds=True)
    with _children_lock:
        _children[process.pid] = process
    return process


def stat(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, start time) of a process, from /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    try:
        return fields[0], int(fields[2]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _poll(pid: int) -> int | None:
    """Reap our own child if it ended; its exit code (None: running or not ours)."""
    with _children_lock:
        process = _children.get(pid)
    return None if process is None else process.poll()


def exit_code(pid: Any) -> int | None:
    """The exit code of our own boot process that ended (None: running, or not ours)."""
    if not pid:
        return None
    return _poll(int(pid))   # it may have ended without being reaped yet


def running(info: dict[str, Any]) -> bool:
    """Whether the process an instance recorded (pid, start time) still runs."""
    pid = info.get("pid")
    if not pid:
        return False
    _poll(int(pid))
    state = stat(int(pid))
    if state is None or state[0] in ("Z", "X"):
        return False
    return info.get("start_time") is None or state[2] == info["start_time"]


def members(infos: list[dict[str, Any]]) -> list[int]:
    """Live processes of instances: each one's boot process group, and every process
    carrying its ``FORNACE_INSTANCE_TOKEN`` (commands run by the agent start
    their own sessions, and servers they leave behind belong to the instance
    too), started no earlier than its boot process.  One pass over /proc."""
    groups = {int(i["pid"]): i.get("start_time") for i in infos if i.get("pid")}
    tokens = {f"{TOKEN_VARIABLE}={i['token']}".encode(): i.get("start_time")
              for i in infos if i.get("token")}
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        state = stat(int(entry))
        if state is None or state[0] in ("Z", "X"):
            continue
        if state[1] in groups:
            start_time = groups[state[1]]
        else:
            found = [tokens[m] for m in _environ(int(entry)) if m in tokens] if tokens else []
            if not found:
                continue
            start_time = found[0]
        if start_time is None or state[2] >= start_time:
            pids.append(int(entry))
    return pids


def _environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def _signal_all(infos: list[dict[str, Any]], signum: int) -> None:
    for member in members(infos):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(member, signum)


def stop_instances(infos: list[dict[str, Any]], timeout: float,
                   fence: Callable[[], ContextManager[Any]] | None = None) -> None:
    """SIGTERM to every process of the instances at once, SIGKILL after ``timeout`` s.

    Each round of signals is sent inside ``fence()`` (which raises instead when the
    caller may no longer act: the local cloud's stack lease was taken), so a caller
    that wakes after losing it signals nothing."""
    infos = [i for i in infos if i.get("pid") or i.get("token")]
    if not infos:
        return
    fence = fence or contextlib.nullcontext

    def gone() -> bool:
        for info in infos:
            if info.get("pid"):
                _poll(int(info["pid"]))
        return not members(infos)

    if not gone():
        with fence():
            _signal_all(infos, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while not gone() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not gone():
            LOG.warning("instance(s) %s did not stop on SIGTERM; killing them",
                        ", ".join(str(i.get("instance", i.get("pid"))) for i in infos))
            with fence():
                _signal_all(infos, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while not gone() and time.monotonic() < deadline:
                time.sleep(0.05)
    for info in infos:
        if info.get("pid"):
            _forget(int(info["pid"]))


def _forget(pid: int) -> None:
    with _children_lock:
        process = _children.pop(pid, None)
    if process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=1)
