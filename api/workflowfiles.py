"""The workflow files an environment's jobs run with, read for the dashboard.

A job's workflows are the conductor's data folder's ``workflows/*.xml`` with
each pinned package's ``workflows/*.xml`` added, a package file replacing the
folder's file of the same name (and a later package, by pinned name, an
earlier one's) -- as the conductor composes them
(``fornace.conductor.packagedata``).  This module lists the files in effect
that way and reads them: the data folder is the API's ``data_dir`` (the
conductor's, on the same machine or a copy of it), the packages are the
archives in the database, checked against their sha256 and unpacked safely
(:func:`fornace.common.packagefiles.unpack`, the upload's limits) once per
digest into a folder of this process.

The API may not import the conductor, so the check (what ``fornace workflow
check`` says of one file) is handed over by the command that starts the API:
``check(file, catalog folder)`` gives ``file:line: message`` lines.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from oslo_config import cfg
from sqlalchemy import select

from fornace.api.errors import NotFound
from fornace.api.pinned import task_packages
from fornace.common.db.models import Deployment, JobTrace, Package
from fornace.common.packagefiles import PackageError, PackageLimits, unpack

# (workflow file, its catalog folder) -> "file:line: message" problems
WorkflowCheck = Callable[[Path, Path], list[str]]

PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.xml")
DATA_FOLDER = "data folder"
KEEP = 16                        # package versions kept unpacked
MAX_SHOWN_BYTES = 2 * 1024 * 1024  # a file's text shown, at most


def data_folder(conf: cfg.ConfigOpts) -> Path:
    """The data folder (``data_dir``, :mod:`fornace.common.options`), as
    :func:`fornace.api.config.catalog_file` finds the catalog in it."""
    return Path(os.path.expanduser(conf.data_dir))


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
                 limits: PackageLimits = PackageLimits(), keep: int = KEEP) -> None:
        """``sessions``: the API's database sessions; ``check``: None when there is
        no checker (the pages then say the files were not checked)."""
        self.sessions = sessions
        self.data_dir = Path(data_dir)
        self.check = check
        self.limits = limits
        self.keep = keep
        self._root = Path(tempfile.mkdtemp(prefix="fornace-workflowfiles-"))
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self._root), True)
        self._unpacked: OrderedDict[str, Path] = OrderedDict()   # digest -> folder
        self._problems: OrderedDict[tuple[str, str], list[Problem]] = OrderedDict()
        self._lock = threading.Lock()

    def close(self) -> None:
        """Remove the unpacked packages."""
        self._cleanup()

    # -- listing ------------------------------------------------------------------
    def listing(self, env_id: str) -> Listing:
        """The files in effect for environment ``env_id`` (the caller was allowed
        to see it), by name."""
        found = Listing()
        files: dict[str, WorkflowFile] = {}
        folder = self.data_dir / "workflows"
        if folder.is_dir():
            for path in sorted(folder.glob("*.xml")):
                if path.is_file():
                    files[path.name] = WorkflowFile(path.name, DATA_FOLDER, path,
                                                    self.data_dir)
        else:
            found.notes.append(f"the data folder {self.data_dir} has no workflows/ folder")
        for ref, unpacked in self._packages(env_id, found.notes):
            source = f"package {ref['name']} {ref['version']}"
            for path in sorted((unpacked / "workflows").glob("*.xml")):
                before = files.get(path.name)
                replaced = (before.replaces + (before.source,)) if before else ()
                files[path.name] = WorkflowFile(
                    path.name, source, path, unpacked,
                    {k: ref[k] for k in ("id", "name", "version")}, replaced)
        found.files = [files[name] for name in sorted(files)]
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
            return db.scalar(select(Deployment.id)
                             .join(JobTrace, JobTrace.deployment_id == Deployment.id)
                             .where(Deployment.environment_id == env_id)
                             .order_by(Deployment.started.desc(), Deployment.created.desc())
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
            missing = [r for r in refs if not self._cached(r["digest"])]
            archives = {r["id"]: db.scalar(select(Package.data).where(Package.id == r["id"]))
                        for r in missing}
        found = []
        for ref in refs:
            try:
                found.append((ref, self._folder(ref, archives.get(ref["id"]))))
            except PackageError as exc:
                notes.append(f"package {ref['name']} {ref['version']}: {exc}")
        return found

    def _cached(self, digest: str) -> bool:
        with self._lock:
            return digest in self._unpacked

    def _folder(self, ref: dict[str, str], data: bytes | None) -> Path:
        digest = ref["digest"]
        with self._lock:
            folder = self._unpacked.get(digest)
            if folder is not None:
                self._unpacked.move_to_end(digest)
                return folder
        if data is None:
            raise PackageError([f"its archive (id {ref['id']}) is not in the database"])
        if hashlib.sha256(data).hexdigest() != digest:
            raise PackageError(["its archive does not match its sha256: it was altered"])
        folder = Path(tempfile.mkdtemp(prefix=digest[:16] + "-", dir=self._root))
        try:
            unpack(data, folder, self.limits)
        except PackageError:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        with self._lock:
            if digest in self._unpacked:       # another thread unpacked it meanwhile
                shutil.rmtree(folder, ignore_errors=True)
                return self._unpacked[digest]
            self._unpacked[digest] = folder
            while len(self._unpacked) > self.keep:
                _, old = self._unpacked.popitem(last=False)
                shutil.rmtree(old, ignore_errors=True)
        return folder
