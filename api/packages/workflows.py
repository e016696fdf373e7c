"""The workflow files an environment's jobs run with, read for the dashboard.

A job's workflows are the conductor's data folder's ``workflows/*.xml`` with
each pinned package's ``workflows/*.xml`` added, by the rule of
:mod:`fornace.common.packages.layers` (a package file replaces the folder's
file of the same name, a later package, by pinned name, an earlier one's) --
the rule the conductor composes them by.  This module lists the files in
effect that way and reads them: the data folder is the API's ``data_dir``
(the conductor's, on the same machine or a copy of it), the packages are the
archives in the database, checked against their sha256 and unpacked safely
once per digest by the shared
:class:`~fornace.common.packages.loader.PackageLoader` (the upload's limits).

The API may not import the conductor, so the check (what ``fornace workflow
check`` says of one file) is handed over by the command that starts the API:
``check(file, catalog folder)`` gives ``file:line: message`` lines.
"""
from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from sqlalchemy import select

from fornace.api.errors import NotFound
from fornace.api.packages.usage import task_packages
from fornace.common.db.models import Job, JobTrace, Package
from fornace.common.packages.archive import PackageError, PackageLimits
from fornace.common.packages.checks import RuleExplain, WorkflowCheck
from fornace.common.packages.layers import (DATA_FOLDER, InEffect, Layer, in_effect,
                                            package_source, workflow_paths)
from fornace.common.packages.loader import KEEP, PackageLoader

PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.xml")
MAX_SHOWN_BYTES = 2 * 1024 * 1024  # a file's text shown, at most


def plain_name(name: str) -> bool:
    """Whether ``name`` is a plain workflow file name (``Deploy.xml``: no folder)."""
    return bool(PLAIN_NAME.fullmatch(name)) and ".." not in name


@dataclass(frozen=True)
class Problem:
    """One problem the check found: its line (None: the whole file), its text
    (``Name.xml:12: message``, without this machine's folders) and message (the
    text without the file and line)."""

    line: int | None
    text: str
    message: str


@dataclass(frozen=True)
class WorkflowFile:
    """A workflow file in effect for an environment."""

    name: str
    source: str                          # "data folder" or "package NAME VERSION"
    path: Path
    catalog: Path                        # the folder its templates are looked for in
    package: dict[str, str] | None = None  # {id, name, version} of its package
    replaces: tuple[str, ...] = ()       # the sources of the files of that name it replaces


@dataclass
class Listing:
    """An environment's workflow files in effect (by name) and what could not be
    read (a package that is gone or does not unpack, a missing folder)."""

    files: list[WorkflowFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class WorkflowFiles:
    """Lists, reads and checks the workflow files of environments."""

    def __init__(self, sessions: Any, data_dir: Path, check: WorkflowCheck | None,
                 limits: PackageLimits = PackageLimits(), keep: int = KEEP,
                 explain: RuleExplain | None = None) -> None:
        """``sessions``: the API's database sessions; ``check``: None when there is
        no checker (the pages then say the files were not checked); ``explain``:
        how a rule is explained on a model (:mod:`fornace.api.packages.why`;
        None: it is not)."""
        self.sessions = sessions
        self.data_dir = Path(data_dir)
        self.check = check
        self.explain = explain
        self.keep = keep
        self._versions: PackageLoader[Path] = PackageLoader(
            limits, keep, prefix="fornace-workflowfiles-")
        self._problems: OrderedDict[tuple[str, str], list[Problem]] = OrderedDict()
        self._lock = threading.Lock()

    def close(self) -> None:
        """Remove the unpacked packages."""
        self._versions.close()

    # -- listing ------------------------------------------------------------------
    def listing(self, env_id: str) -> Listing:
        """The files in effect for environment ``env_id`` (the caller was allowed
        to see it), by name."""
        found = Listing()
        if not (self.data_dir / "workflows").is_dir():
            found.notes.append(f"the data folder {self.data_dir} has no workflows/ folder")
        base = Layer(DATA_FOLDER, workflow_paths(self.data_dir), self.data_dir)
        packages = [Layer(package_source(ref), workflow_paths(folder), folder, ref)
                    for ref, folder in self._packages(env_id, found.notes)]
        found.files = [_workflow_file(f) for f in in_effect(base, packages)]
        return found

    def file(self, env_id: str, name: str) -> tuple[WorkflowFile, Listing]:
        """The file ``name`` in effect for the environment, and the listing it is
        in; NotFound for a name that is not a plain ``*.xml`` name or not in effect."""
        if not plain_name(name):
            raise NotFound(f"{name[:80]!r} is not a workflow file name (Name.xml)")
        listing = self.listing(env_id)
        for found in listing.files:
            if found.name == name:
                return found, listing
        raise NotFound(f"environment {env_id} runs no workflow file {name}")

    def last_traced_job(self, env_id: str) -> str | None:
        """The id of the environment's latest job that has a trace (None: none has)."""
        with self.sessions() as db:
            return db.scalar(select(Job.id)
                             .join(JobTrace, JobTrace.deployment_id == Job.id)
                             .where(Job.environment_id == env_id)
                             .order_by(Job.started.desc(), Job.created.desc())
                             .limit(1))

    # -- reading and checking -----------------------------------------------------
    @staticmethod
    def text(found: WorkflowFile) -> tuple[list[str], bool]:
        """The file's lines (undecodable bytes replaced), and whether they were
        cut at :data:`MAX_SHOWN_BYTES`."""
        with open(found.path, "rb") as source:
            data = source.read(MAX_SHOWN_BYTES + 1)
        cut = len(data) > MAX_SHOWN_BYTES
        text = data[:MAX_SHOWN_BYTES].decode("utf-8", "replace")
        return text.splitlines(), cut

    def problems(self, found: WorkflowFile) -> list[Problem] | None:
        """What the check says of the file (None: there is no checker).  A
        package's file never changes, so its problems are kept; a data folder
        file is checked each time (it, or a template it names, may be edited)."""
        if self.check is None:
            return None
        key = (str(found.path), found.source)
        if found.package is not None:
            with self._lock:
                if key in self._problems:
                    self._problems.move_to_end(key)
                    return self._problems[key]
        problems = [self._problem(found, text) for text in self.check(found.path, found.catalog)]
        if found.package is not None:
            with self._lock:
                self._problems[key] = problems
                while len(self._problems) > 64 * self.keep:
                    self._problems.popitem(last=False)
        return problems

    @staticmethod
    def _problem(found: WorkflowFile, text: str) -> Problem:
        for folder in {str(found.catalog.resolve()), str(found.catalog)}:
            text = text.replace(folder + "/", "")
        located = re.match(rf"(?:[^\n]*/)?{re.escape(found.name)}:(\d+): (.*)", text, re.S)
        if located is None:
            return Problem(None, text, text)
        line, message = int(located.group(1)), located.group(2)
        return Problem(line, f"{found.name}:{line}: {message}", message)

    # -- the packages -------------------------------------------------------------
    def _packages(self, env_id: str, notes: list[str]) -> list[tuple[dict[str, str], Path]]:
        """The environment's pinned packages (by name) and their unpacked folders;
        one that cannot be had is a note."""
        with self.sessions() as db:
            refs = task_packages(db, env_id)
            missing = [r for r in refs if not self._versions.has(r["digest"])]
            archives = {r["id"]: db.scalar(select(Package.data).where(Package.id == r["id"]))
                        for r in missing}
        found = []
        for ref in refs:
            try:
                found.append((ref, self._versions.get(ref, archives.get)))
            except PackageError as exc:
                notes.append(f"{package_source(ref)}: {exc}")
        return found


def _workflow_file(found: InEffect[Path]) -> WorkflowFile:
    """A file in effect as the pages show it (every layer here has its folder)."""
    layer = found.layer
    package = None if layer.ref is None else {k: layer.ref[k] for k in ("id", "name", "version")}
    return WorkflowFile(found.name, layer.source, found.item, cast(Path, layer.folder),
                        package, found.replaces)
