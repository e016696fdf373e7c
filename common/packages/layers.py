"""The rule by which package files are laid over the data folder's.

A job runs the data folder's workflow files with each pinned package's
added, the packages taken by pinned name: a package's file replaces the data
folder's file of the same name, and a later package's file an earlier
one's.  Templates are looked for in the packages first (by pinned name),
then in the data folder.  The conductor composes a job's data by this rule
(:mod:`fornace.conductor.packages.jobdata`) and the API shows the files in
effect by it (:mod:`fornace.api.packages.workflows`); it is written here
once so that the two cannot drift apart.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Mapping, Sequence, TypeVar

T = TypeVar("T")
S = TypeVar("S")

DATA_FOLDER = "data folder"


def version_name(ref: Mapping[str, str]) -> str:
    """A package version as jobs, traces and change detection name it: ``NAME VERSION``."""
    return f"{ref['name']} {ref['version']}"


def job_packages(refs: Sequence[Mapping[str, str]] | None) -> list[str]:
    """What a job runs, as it and its trace record it: the versions of the
    packages its environment is pinned to, or ``["data folder"]`` when none."""
    return [version_name(ref) for ref in refs or ()] or [DATA_FOLDER]


def package_source(ref: Mapping[str, str]) -> str:
    """How a version is named where its files show: ``package NAME VERSION``."""
    return f"package {version_name(ref)}"


@dataclass(frozen=True)
class Layer(Generic[T]):
    """The files one source brings, by file name: the data folder's, or a package's."""

    source: str                              # "data folder" or "package NAME VERSION"
    files: Mapping[str, T]
    folder: Path | None = None               # the catalog folder the files are in
    ref: Mapping[str, str] | None = None     # the package's {id, name, version, digest}


@dataclass(frozen=True)
class InEffect(Generic[T]):
    """A file in effect: what it is, the layer it comes from, and the sources of
    the files of its name it replaces (earliest first)."""

    name: str
    item: T
    layer: Layer[T]
    replaces: tuple[str, ...] = ()


def in_effect(base: Layer[T], packages: Sequence[Layer[T]]) -> list[InEffect[T]]:
    """The files in effect, by name: ``base`` (the data folder's), each of
    ``packages`` (in pinned-name order) replacing the files of the same name
    of the layers before it."""
    files: dict[str, InEffect[T]] = {}
    for layer in (base, *packages):
        for name, item in layer.files.items():
            before = files.get(name)
            replaces = (*before.replaces, before.layer.source) if before else ()
            files[name] = InEffect(name, item, layer, replaces)
    return [files[name] for name in sorted(files)]


def template_order(base: S, packages: Sequence[S]) -> list[S]:
    """Where templates are looked for, first to last: the packages (in pinned-name
    order), then the data folder."""
    return [*packages, base]


def workflow_paths(folder: Path) -> dict[str, Path]:
    """The workflow files (``workflows/*.xml``) of a catalog folder, by name."""
    return {path.name: path for path in sorted((folder / "workflows").glob("*.xml"))
            if path.is_file()}
