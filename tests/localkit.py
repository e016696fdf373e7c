"""Helpers for tests of the local cloud: finding the processes of a unit."""
from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie does not count)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


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
