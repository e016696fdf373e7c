"""What configured a unit: the files a command came from, and where each came from.

An agent command is queued by a rule of a workflow file, runs an agent
template, and the template ships scripts.  Each of these is a *source*:
``{"digest": <sha256 of its bytes, 16 hex>, "from": <origin>}``, the origin
being ``data folder`` or the package version that holds the file in effect
(``kvstore 1.1.0``), keyed ``workflow file Kv.xml``, ``template Kv/Deploy``
or ``script deploy_kv.py``.

Change detection (:mod:`fornace.conductor.jobs.changes`) keeps the sources
of each command that ran with the unit's config, and before the next
deployment compares them with what the job's data would run now
(:func:`changed_sources`): a package move or an edited data folder that
changes one of them reconfigures the unit.  A config recorded before
sources were kept names none: nothing is known to have changed.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Mapping

from fornace.common.errors import FornaceError
from fornace.common.packages.layers import DATA_FOLDER

WORKFLOW = "workflow file"
TEMPLATE = "template"
SCRIPT = "script"
_KINDS = (SCRIPT, TEMPLATE, WORKFLOW)    # the order reasons name them in

Source = dict[str, str]


def source_key(kind: str, name: str) -> str:
    return f"{kind} {name}"


def split_key(key: str) -> tuple[str, str] | None:
    """``("script", "deploy_kv.py")`` of ``script deploy_kv.py``; None: not a source key."""
    for kind in _KINDS:
        if key.startswith(kind + " ") and len(key) > len(kind) + 1:
            return kind, key[len(kind) + 1:]
    return None


def _order(key: str) -> tuple[int, str]:
    split = split_key(key)
    return (_KINDS.index(split[0]) if split else len(_KINDS), key)


def changed_sources(recorded: Any, current: Callable[[str], Source | None]) -> str | None:
    """Why the command whose sources were ``recorded`` would not run the same
    now (``current(key)``: the source in effect, None when there is none), or
    None when every source it names is the same (or it names none: a config
    recorded before sources were kept is not known to have changed).

    Only the content counts: a file moved to another package version unchanged
    is the same source.
    """
    if not isinstance(recorded, dict):
        return None
    reasons = []
    for key in sorted(recorded, key=_order):
        was = recorded[key]
        if not isinstance(was, dict) or split_key(key) is None:
            continue
        now = current(key)
        if now is None:
            reasons.append(f"{key} no longer found (it was in {was.get('from')})")
        elif now.get("digest") != was.get("digest"):
            before = f" (was {was.get('from')})" if was.get("from") != now.get("from") else ""
            reasons.append(f"{key} changed in {now.get('from')}{before}")
    return "; ".join(reasons) or None


def workflow_file(where: str) -> str:
    """``Kv.xml`` of an action's ``/.../workflows/Kv.xml:12``."""
    path = str(where).rpartition(":")[0]
    return os.path.basename(path) if path else ""


class RunSources:
    """The sources a job's data runs: its workflow files (each from the data
    folder or the package version given in ``origins``, by file name) and its
    template store (:meth:`fornace.conductor.templates.TemplateStore.source`)."""

    def __init__(self, workflows: list[Any], store: Any,
                 origins: Mapping[str, str] | None = None) -> None:
        origins = origins or {}
        self.store = store
        self._workflows: dict[str, Source] = {
            w.path.name: {"digest": w.digest, "from": origins.get(w.path.name, DATA_FOLDER)}
            for w in workflows if getattr(w, "digest", "")}
        self._files: dict[str, Source | None] = {}          # template/script key -> source
        self._commands: dict[tuple[str, str], dict[str, Source]] = {}

    def current(self, key: str) -> Source | None:
        """The source in effect under ``key`` (None: no such file now)."""
        split = split_key(key)
        if split is None:
            return None
        kind, name = split
        if kind == WORKFLOW:
            return self._workflows.get(name)
        if key not in self._files:
            try:
                digest, origin = self.store.source(kind, name)
                self._files[key] = {"digest": digest, "from": origin}
            except (FornaceError, OSError):
                self._files[key] = None
        return self._files[key]

    def of_command(self, where: str, template: str) -> dict[str, Source]:
        """The sources of an agent command: the workflow file of the rule that
        queued it (``where``: file:line), its template and the template's scripts."""
        found = self._commands.get((where, template))
        if found is not None:
            return found
        found = {}
        keys = [source_key(WORKFLOW, workflow_file(where)), source_key(TEMPLATE, template)]
        try:
            scripts = self.store.agent_template(template).get("Scripts")
        except (FornaceError, OSError):
            scripts = None
        if isinstance(scripts, list):
            keys += [source_key(SCRIPT, name) for name in scripts if isinstance(name, str)]
        for key in keys:
            source = self.current(key)
            if source is not None:
                found[key] = source
        self._commands[(where, template)] = found
        return found
