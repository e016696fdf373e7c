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


def running_onebox(state_dir: Path, max_environments: int = 2, agent_timeout: float = 60,
                   db: str | None = None, conf=None):
    """A started :class:`fornace.cli.onebox.OneBox` on ``state_dir`` (folder broker and
    SQLite unless ``conf``/``db`` say otherwise), for ``yield from`` in a fixture:
    stopped at the end, and every local-cloud stack deleted (which stops every
    process of the units) even when the test failed."""
    from fornace.cli.main import build_conf
    from fornace.cli.onebox import OneBox

    if conf is None:
        conf = build_conf()
        conf(["up"], project="fornace", default_config_files=[], default_config_dirs=[])
    conf.set_override("state_dir", str(state_dir), group="api")
    conf.set_override("agent_timeout", agent_timeout, group="engine")
    onebox = OneBox(conf, host="127.0.0.1", port=0, db=db, max_environments=max_environments)
    onebox.start()
    try:
        yield onebox
    finally:
        onebox.stop()
        for stack in onebox.cloud.stack_names():
            onebox.cloud.delete(stack)
