"""Workflow packages as archives: unpacked safely, their manifest read.

A package is a zip or a tar (plain or gzip) archive laid out as a catalog
folder -- what ``data_dir`` holds and the conductor reads::

    package.json                 {"name": "web-stack", "version": "1.2.0",
                                  "description": "IIS and SQL Server"}
    workflows/*.xml
    templates/cf/*.template
    templates/agent/*.template
    templates/agent/scripts/*    (the scripts execution plans name)
    init-scripts/*               (optional)
    types.json                   (optional catalog entries)

The archive comes from a user, so nothing of it is trusted: every member is
checked before a byte is written (no absolute path, no ``..``, no link or
device, no name outside the layout above), members are counted, and the
bytes written are counted as they are decompressed, so that a small archive
expanding to gigabytes (a zip bomb) stops at the limit instead of filling
the disk.  Each refusal is a :class:`PackageError` naming the member.
"""
from __future__ import annotations

import gzip
import io
import json
import re
import stat
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, Iterator

from fornace.common import names
from fornace.common.errors import FornaceError
from fornace.common.jsonlimits import JsonLimitError, loads

MANIFEST = "package.json"
# the top-level entries a package may hold (folders end with /)
LAYOUT = ("workflows/", "templates/", "init-scripts/", MANIFEST, "types.json")
NAME = names.ID             # a package's name is an id (fornace.common.names)
VERSION = names.VERSION
MAX_DESCRIPTION = 1000
_CHUNK = 64 * 1024
MiB = 1024 * 1024

ZIP, TAR, TAR_GZ = "application/zip", "application/x-tar", "application/gzip"
SUFFIXES = {ZIP: ".zip", TAR: ".tar", TAR_GZ: ".tar.gz"}


class PackageError(FornaceError):
    """The archive is refused: each problem names a member or the manifest."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class PackageLimits:
    """How big a package may be: the archive, its members, what they expand to."""

    max_bytes: int = 16 * MiB
    max_files: int = 1000
    max_unpacked_bytes: int = 64 * MiB


@dataclass(frozen=True)
class Manifest:
    """What ``package.json`` says."""

    name: str
    version: str
    description: str = ""

    def view(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version, "description": self.description}


@dataclass(frozen=True)
class Member:
    """A regular file of the archive, as it will be written."""

    name: str
    size: int            # as declared by the archive; the bytes written are counted anyway
    open: Any            # () -> a binary file of its content


def content_type(data: bytes) -> str:
    """The archive's type from its first bytes (zip, gzip, else tar);
    :class:`PackageError` for anything else."""
    if data[:4] == b"PK\x03\x04":
        return ZIP
    if data[:2] == b"\x1f\x8b":
        return TAR_GZ
    if len(data) > 262 and data[257:262] == b"ustar":
        return TAR
    raise PackageError(["the package is not a zip, tar or tar.gz archive"])


def unpack(data: bytes, into: Path, limits: PackageLimits = PackageLimits()) -> list[str]:
    """Write the archive's files into the empty folder ``into``; their names, sorted.

    Refused (:class:`PackageError`) before anything is written when a member
    is unsafe or outside the layout, or there are too many; while writing,
    as soon as the bytes written go past ``limits.max_unpacked_bytes``.
    """
    if len(data) > limits.max_bytes:
        raise PackageError([f"the package is {len(data)} bytes, more than the "
                            f"{limits.max_bytes} allowed ([api] max_package_bytes)"])
    kind = content_type(data)
    try:
        if kind == TAR_GZ:
            data = _gunzip(data, limits)
        members = list(_zip_members(data) if kind == ZIP else _tar_members(data))
        _check_members(members, limits)
        _write(members, into, limits)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, ValueError) as exc:
        # OSError/zlib errors: a corrupt or truncated archive, not this machine's disk
        raise PackageError([f"the archive is damaged: {exc}"]) from None
    return sorted(m.name for m in members)


def _zip_members(data: bytes) -> Iterator[Member]:
    archive = zipfile.ZipFile(io.BytesIO(data))
    for info in archive.infolist():
        kind = stat.S_IFMT(info.external_attr >> 16)   # 0: no Unix type recorded
        _admit(info.filename, kind == stat.S_IFLNK, kind in (0, stat.S_IFREG, stat.S_IFDIR))
        if not info.is_dir():
            yield Member(info.filename, info.file_size, lambda info=info: archive.open(info))


def _gunzip(data: bytes, limits: PackageLimits) -> bytes:
    """A gzip stream decompressed, stopping past what its files may expand to
    (plus the tar headers of as many files as allowed): reading a tar's member
    list decompresses it all, so a gzip bomb is stopped here."""
    limit = limits.max_unpacked_bytes + 1024 * (limits.max_files + 2)
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
        while chunk := stream.read(_CHUNK):
            if out.tell() + len(chunk) > limit:
                raise PackageError([f"the package expands to more than "
                                    f"{limits.max_unpacked_bytes} bytes "
                                    f"([api] max_package_unpacked_bytes)"])
            out.write(chunk)
    return out.getvalue()


def _tar_members(data: bytes) -> Iterator[Member]:
    archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
    for info in archive.getmembers():
        _admit(info.name, info.issym() or info.islnk(), info.isfile() or info.isdir())
        if not info.isdir():
            yield Member(info.name, info.size, lambda info=info: archive.extractfile(info))


def _admit(name: str, link: bool, file_or_folder: bool) -> None:
    """Refuse a member that is a link, a device or a FIFO, or whose name is unsafe
    (absolute, ``..``, a drive, backslashes)."""
    if link:
        raise PackageError([f"{name}: links are not allowed in a package"])
    if not file_or_folder:
        raise PackageError([f"{name}: only files and folders are allowed"])
    if not name or name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        raise PackageError([f"{name or '(empty name)'}: absolute paths are not allowed"])
    if "\\" in name or "\x00" in name:
        raise PackageError([f"{name}: backslashes and NUL are not allowed in names"])
    if ".." in PurePosixPath(name).parts:
        raise PackageError([f"{name}: '..' is not allowed in a package's paths"])


def _relative(name: str) -> str:
    return str(PurePosixPath(name.removeprefix("./")))


def _check_members(members: list[Member], limits: PackageLimits) -> None:
    if len(members) > limits.max_files:
        raise PackageError([f"the package has {len(members)} files, more than the "
                            f"{limits.max_files} allowed ([api] max_package_files)"])
    problems, seen = [], set()
    for member in members:
        name = _relative(member.name)
        if name in seen:
            problems.append(f"{name}: is in the archive twice")
        seen.add(name)
        if not any(name == entry or name.startswith(entry) for entry in LAYOUT):
            hint = (": scripts go in templates/agent/scripts/ (the catalog's layout)"
                    if name.startswith("scripts/") else
                    f": a package holds only {', '.join(LAYOUT)}")
            problems.append(f"{name}: unexpected file{hint}")
    if MANIFEST not in seen:
        problems.append(f"{MANIFEST}: missing (name, version and description of the package)")
    if problems:
        raise PackageError(problems)


def _write(members: list[Member], into: Path, limits: PackageLimits) -> None:
    """Write each member, counting the bytes actually decompressed (the sizes an
    archive declares may lie)."""
    written = 0
    for member in members:
        target = into / _relative(member.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        source: IO[bytes] = member.open()
        with source, open(target, "xb") as out:
            while chunk := source.read(_CHUNK):
                written += len(chunk)
                if written > limits.max_unpacked_bytes:
                    raise PackageError([
                        f"{member.name}: the package expands to more than "
                        f"{limits.max_unpacked_bytes} bytes ([api] max_package_unpacked_bytes)"])
                out.write(chunk)


def read_manifest(folder: Path) -> Manifest:
    """``package.json`` of an unpacked package; :class:`PackageError` naming the
    line of a JSON error (or of nesting too deep), or the field that is wrong."""
    path = folder / MANIFEST
    try:
        document = loads(path.read_text(encoding="utf-8"), source=MANIFEST)
    except UnicodeDecodeError:
        raise PackageError([f"{MANIFEST}: not UTF-8 text"]) from None
    except json.JSONDecodeError as exc:
        raise PackageError([f"{MANIFEST}:{exc.lineno}: invalid JSON: {exc.msg}"]) from None
    except JsonLimitError as exc:
        raise PackageError([str(exc)]) from None
    if not isinstance(document, dict):
        raise PackageError([f"{MANIFEST}: must be a JSON object with name and version"])
    problems = []
    name, version = document.get("name"), document.get("version")
    description = document.get("description", "")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        problems.append(f"{MANIFEST}: name must be 1 to 64 letters, digits, '.', '_' or '-' "
                        f"(starting with a letter or digit), not {name!r}")
    if not isinstance(version, str) or not VERSION.fullmatch(version):
        problems.append(f"{MANIFEST}: version must be 1 to 32 letters, digits, '.', '+' or "
                        f"'-' (e.g. 1.2.0), not {version!r}")
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        problems.append(f"{MANIFEST}: description must be text of at most "
                        f"{MAX_DESCRIPTION} characters")
    unknown = sorted(set(document) - {"name", "version", "description"})
    if unknown:
        problems.append(f"{MANIFEST}: unknown fields {', '.join(unknown)} "
                        f"(known: name, version, description)")
    if problems:
        raise PackageError(problems)
    return Manifest(name, version, description)


def pack(folder: Path) -> bytes:
    """A folder laid out as a package, as a tar.gz archive (what ``fornace package
    upload DIR`` sends): regular files only, names relative to ``folder``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_symlink():
                raise PackageError([f"{path}: links are not allowed in a package"])
            if path.is_file() and "__pycache__" not in path.parts:
                archive.add(path, arcname=path.relative_to(folder).as_posix(),
                            recursive=False)
    return buffer.getvalue()
