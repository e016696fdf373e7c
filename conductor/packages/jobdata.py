"""The workflows, templates and types a task runs with (contract 1.8).

A task names the workflow packages its environment is pinned to, by id and
sha256.  The conductor reads each archive from the database the first time a
task names it; the shared :class:`~fornace.common.packages.loader.PackageLoader`
checks its digest and unpacks it (with the upload's limits) into a folder of
its own, and its workflows are loaded; a version is immutable, so what was
loaded serves every later task naming the same digest, and a new version is
read when the first task names it -- no restart.  The last :data:`KEEP`
versions stay loaded; the folders go when the conductor stops.

A job's workflows are the conductor's data folder's with each package's
files added, by the rule of :mod:`fornace.common.packages.layers` (a package
file replaces the folder's file of the same name; templates are looked up in
the packages first, :class:`~fornace.conductor.templates.TemplateLayers`);
types join the conductor's catalog.  What cannot be had (no database, a
package deleted or altered, a file that no longer loads) is a
:class:`PackageUnavailable`: the job ends with it as an error, the task is
not retried.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fornace.common.catalog import Catalog, CatalogError, load_catalog
from fornace.common.errors import FornaceError
from fornace.common.packages.archive import PackageError, PackageLimits
from fornace.common.packages.layers import (DATA_FOLDER, Layer, in_effect, package_source,
                                            template_order, version_name)
from fornace.common.packages.loader import (KEEP, ArchiveMissing, ArchiveReader,
                                            PackageLoader, Ref)
from fornace.conductor.dsl.limits import Limits
from fornace.conductor.dsl.workflows import Workflow
from fornace.conductor.jobs.sources import RunSources
from fornace.conductor.workflowfiles import load_workflows
from fornace.conductor.templates import TemplateLayers, TemplateStore

LOG = logging.getLogger(__name__)

class PackageUnavailable(FornaceError):
    """A package a task names cannot be loaded; the message says which and why."""


@dataclass(frozen=True)
class JobData:
    """What one job runs with."""

    workflows: list[Workflow]
    store: Any                      # TemplateStore or TemplateLayers
    catalog: Catalog | None
    # the package version each workflow file in effect comes from, by file name
    # (``kvstore 1.1.0``; a file not named: the data folder's)
    origins: dict[str, str] = field(default_factory=dict)

    def sources(self) -> RunSources:
        """The files this data runs, as change detection compares them."""
        return RunSources(self.workflows, self.store, self.origins)


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
        self.keep = keep
        # evicted folders stay until close: a running job may still read their templates
        self._versions: PackageLoader[_Loaded] = PackageLoader(
            package_limits, keep, prepare=self._prepare, remove_evicted=False)
        self._lock = threading.Lock()
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
        files = in_effect(
            Layer(DATA_FOLDER, {w.path.name: w for w in self.base.workflows}),
            [Layer(package_source(ref), {w.path.name: w for w in package.workflows}, ref=ref)
             for ref, package in loaded])
        catalog = self.base.catalog
        for ref, package in loaded:
            if package.types is not None:
                try:
                    catalog = load_catalog(package.types, base=catalog)
                except CatalogError as exc:
                    raise PackageUnavailable(f"package {version_name(ref)}: {exc}") from None
        store = TemplateLayers(template_order(self.base.store, [p.store for _r, p in loaded]))
        origins = {found.name: version_name(found.layer.ref) for found in files
                   if found.layer.ref is not None}
        return JobData([found.item for found in files], store, catalog, origins)

    def close(self) -> None:
        self._versions.close()

    # -- loading one version -------------------------------------------------------

    def _package(self, ref: dict[str, str]) -> _Loaded:
        name = version_name(ref)
        if self._read is None:
            raise PackageUnavailable(f"package {name}: this conductor has no database "
                                     f"(database_url) to read workflow packages from")
        try:
            return self._versions.get(ref, self._read)
        except ArchiveMissing:
            raise PackageUnavailable(f"package {name} (id {ref['id']}) is not in the "
                                     f"database: it was deleted (or this conductor's "
                                     f"[database] connection is not the API's)") from None
        except PackageError as exc:
            raise PackageUnavailable(f"package {name}: {exc}") from None

    def _prepare(self, ref: Ref, folder: Path) -> _Loaded:
        """A version unpacked in ``folder``, its workflows loaded."""
        workflows = load_workflows(folder / "workflows")
        types = folder / "types.json"
        LOG.info("loaded workflow package %s: %d workflow file(s)", version_name(ref), len(workflows))
        return _Loaded(folder, workflows,
                       TemplateStore(folder, fallback=None, limits=self.limits,
                                     origin=version_name(ref)),
                       types if types.is_file() else None)
