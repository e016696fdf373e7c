"""The workflows, templates and types a task runs with (contract 1.8).

A task names the workflow packages its environment is pinned to, by id and
sha256.  The conductor reads each archive from the database the first time a
task names it, checks its digest, unpacks it (with the upload's limits) into
a folder of its own and loads its workflows; a version is immutable, so what
was loaded serves every later task naming the same digest, and a new
version is read when the first task names it -- no restart.  The last
:data:`KEEP` versions stay loaded; the folders go when the conductor stops.

A job's workflows are the conductor's data folder's, with each package's
files added; a package file of the same name as one of the folder's replaces
it.  Templates are looked up in the packages first
(:class:`~fornace.conductor.templates.TemplateLayers`), types join the
conductor's catalog.  What cannot be had (no database, a package deleted or
altered, a file that no longer loads) is a :class:`PackageUnavailable`: the
job ends with it as an error, the task is not retried.
"""
from __future__ import annotations

import hashlib
import logging
import shutil
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from fornace.common.catalog import Catalog, CatalogError, load_catalog
from fornace.common.errors import FornaceError
from fornace.common.packagefiles import PackageError, PackageLimits, unpack
from fornace.conductor.dsl.limits import Limits
from fornace.conductor.dsl.workflows import Workflow
from fornace.conductor.templates import TemplateLayers, TemplateStore
from fornace.conductor.workflowfiles import load_workflows

LOG = logging.getLogger(__name__)

KEEP = 16   # package versions kept loaded (their folders on disk too)

# reads a package's archive by id: its bytes, or None when there is no such package
ArchiveReader = Callable[[str], "bytes | None"]


class PackageUnavailable(FornaceError):
    """A package a task names cannot be loaded; the message says which and why."""


@dataclass(frozen=True)
class JobData:
    """What one job runs with."""

    workflows: list[Workflow]
    store: Any                      # TemplateStore or TemplateLayers
    catalog: Catalog | None


@dataclass
class _Loaded:
    folder: Path
    workflows: list[Workflow]
    store: TemplateStore
    types: Path | None


def database_reader(engine: Any) -> ArchiveReader:
    """Reads archives from the API's ``packages`` table through ``engine``."""
    from sqlalchemy import select

    from fornace.common.db.models import Package

    def read(package_id: str) -> bytes | None:
        with engine.connect() as connection:
            return connection.scalar(select(Package.data).where(Package.id == package_id))
    return read


class PackageData:
    """The conductor's own data, and the package versions its tasks named."""

    def __init__(self, base: JobData, read: ArchiveReader | None,
                 limits: Limits | None = None,
                 package_limits: PackageLimits = PackageLimits(), keep: int = KEEP) -> None:
        self.base = base
        self._read = read
        self.limits = limits or Limits()
        self.package_limits = package_limits
        self.keep = keep
        self._root = Path(tempfile.mkdtemp(prefix="fornace-packages-"))
        self._loaded: OrderedDict[str, _Loaded] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}
        self._jobs: OrderedDict[tuple[str, ...], JobData] = OrderedDict()

    def for_task(self, refs: list[dict[str, str]]) -> JobData:
        """The job data of a task naming ``refs`` (``{id, name, version, digest}``)."""
        if not refs:
            return self.base
        key = tuple(ref["digest"] for ref in refs)
        with self._lock:
            made = self._jobs.get(key)
            if made is not None:
                self._jobs.move_to_end(key)
                return made
        made = self._job_data(refs)
        with self._lock:
            self._jobs[key] = made
            while len(self._jobs) > self.keep:
                self._jobs.popitem(last=False)
        return made

    def _job_data(self, refs: list[dict[str, str]]) -> JobData:
        """The job data of ``refs``, made once per set of versions (the catalog
        joined with theirs is the costly part: about 8 ms)."""
        loaded = [(ref, self._package(ref)) for ref in refs]
        files = {w.path.name: w for w in self.base.workflows}
        for _ref, package in loaded:
            files.update({w.path.name: w for w in package.workflows})
        catalog = self.base.catalog
        for ref, package in loaded:
            if package.types is not None:
                try:
                    catalog = load_catalog(package.types, base=catalog)
                except CatalogError as exc:
                    raise PackageUnavailable(f"package {_name(ref)}: {exc}") from None
        store = TemplateLayers([p.store for _r, p in loaded] + [self.base.store])
        return JobData([files[name] for name in sorted(files)], store, catalog)

    def close(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)

    # -- loading one version -------------------------------------------------------

    def _package(self, ref: dict[str, str]) -> _Loaded:
        digest = ref["digest"]
        with self._lock:
            found = self._loaded.get(digest)
            if found is not None:
                self._loaded.move_to_end(digest)
                return found
            gate = self._loading.setdefault(digest, threading.Lock())
        with gate:   # one thread loads a version; the others wait for it
            with self._lock:
                found = self._loaded.get(digest)
            if found is None:
                found = self._load(ref)
                with self._lock:
                    self._loaded[digest] = found
                    self._loading.pop(digest, None)
                    self._evict()
        return found

    def _load(self, ref: dict[str, str]) -> _Loaded:
        name = _name(ref)
        if self._read is None:
            raise PackageUnavailable(f"package {name}: this conductor has no database "
                                     f"(database_url) to read workflow packages from")
        data = self._read(ref["id"])
        if data is None:
            raise PackageUnavailable(f"package {name} (id {ref['id']}) is not in the "
                                     f"database: it was deleted (or this conductor's "
                                     f"[database] connection is not the API's)")
        if hashlib.sha256(data).hexdigest() != ref["digest"]:
            raise PackageUnavailable(f"package {name}: its archive does not match the "
                                     f"sha256 the task names: it was altered")
        # a folder per load: a job still reading an evicted version keeps its files
        folder = Path(tempfile.mkdtemp(prefix=ref["digest"][:16] + "-", dir=self._root))
        try:
            unpack(data, folder, self.package_limits)
            workflows = load_workflows(folder / "workflows")
        except (PackageError, FornaceError) as exc:
            shutil.rmtree(folder, ignore_errors=True)
            text = str(exc).replace(str(folder) + "/", "")
            raise PackageUnavailable(f"package {name}: {text}") from None
        types = folder / "types.json"
        LOG.info("loaded workflow package %s: %d workflow file(s)", name, len(workflows))
        return _Loaded(folder, workflows,
                       TemplateStore(folder, fallback=None, limits=self.limits),
                       types if types.is_file() else None)

    def _evict(self) -> None:
        """Forget the least recently used versions past ``keep`` (their folders stay
        until :meth:`close`: a running job may still read their templates)."""
        while len(self._loaded) > self.keep:
            self._loaded.popitem(last=False)


def _name(ref: dict[str, str]) -> str:
    return f"{ref['name']} {ref['version']}"
