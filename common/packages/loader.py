"""Stored package versions, unpacked once per digest.

A stored version is named by a reference ``{id, name, version, digest}``
(what a task carries, contract 1.8).  :class:`PackageLoader` reads its
archive through the reader it is given (the database, or archives already
in hand), refuses it unless its sha256 is the digest the reference names,
unpacks it safely with the upload's limits
(:func:`fornace.common.packages.archive.unpack`) into a folder of its own,
and prepares it (the conductor loads its workflows; the API keeps the
folder).  A version is immutable, so what was prepared serves every later
request naming the same digest; the last ``keep`` versions stay, one thread
loads a version while the others wait for it, the folders go on
:meth:`PackageLoader.close` (or when the loader is collected).

Used by the API (the workflow files in effect) and the conductor (a job's
data).  Nothing here reads options: the caller passes the limits and how
many versions to keep.
"""
from __future__ import annotations

import hashlib
import shutil
import tempfile
import threading
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Generic, Mapping, TypeVar

from fornace.common.errors import FornaceError
from fornace.common.packages.archive import PackageError, PackageLimits, unpack

T = TypeVar("T")

KEEP = 16   # package versions kept unpacked

# a package's archive by id: its bytes, or None when there is no such package
ArchiveReader = Callable[[str], "bytes | None"]
Ref = Mapping[str, str]


class ArchiveMissing(PackageError):
    """The reader has no archive of the version (it was deleted)."""

    def __init__(self, ref: Ref) -> None:
        super().__init__([f"its archive (id {ref['id']}) is not in the database"])
        self.ref = ref


class ArchiveAltered(PackageError):
    """The archive's sha256 is not the digest the reference names."""

    def __init__(self) -> None:
        super().__init__(["its archive does not match its sha256: it was altered"])


def _folder_itself(ref: Ref, folder: Path) -> Path:
    return folder


class PackageLoader(Generic[T]):
    """Package versions unpacked (and prepared) once per digest, the last ``keep``
    kept."""

    def __init__(self, limits: PackageLimits = PackageLimits(), keep: int = KEEP,
                 prepare: Callable[[Ref, Path], T] = _folder_itself,  # type: ignore[assignment]
                 remove_evicted: bool = True, prefix: str = "fornace-packages-") -> None:
        """``prepare(ref, folder)``: what is kept of an unpacked version (default:
        its folder); a :class:`FornaceError` it raises refuses the version.
        ``remove_evicted``: remove a version's folder as soon as it is no longer
        kept (False: at :meth:`close`, for a caller whose running work may still
        read an evicted version's files)."""
        self.limits = limits
        self.keep = keep
        self._prepare = prepare
        self._remove_evicted = remove_evicted
        self._root = Path(tempfile.mkdtemp(prefix=prefix))
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self._root), True)
        self._kept: OrderedDict[str, tuple[Path, T]] = OrderedDict()   # digest ->
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}

    def close(self) -> None:
        """Remove every unpacked version."""
        self._cleanup()

    def has(self, digest: str) -> bool:
        """Whether the version of ``digest`` is kept (it needs no reading)."""
        with self._lock:
            return digest in self._kept

    def get(self, ref: Ref, read: ArchiveReader) -> T:
        """The prepared version ``ref`` names; ``read(id)`` is called only when it
        is not kept.  :class:`ArchiveMissing`, :class:`ArchiveAltered`, or a
        :class:`PackageError` saying why it does not unpack or prepare (this
        process's folders left out of the text)."""
        digest = ref["digest"]
        with self._lock:
            found = self._kept.get(digest)
            if found is not None:
                self._kept.move_to_end(digest)
                return found[1]
            gate = self._loading.setdefault(digest, threading.Lock())
        with gate:   # one thread loads a version; the others wait for it
            with self._lock:
                found = self._kept.get(digest)
            if found is None:
                try:
                    found = self._keep(digest, self._load(ref, read))
                finally:
                    with self._lock:
                        self._loading.pop(digest, None)
        return found[1]

    def _load(self, ref: Ref, read: ArchiveReader) -> tuple[Path, T]:
        data = read(ref["id"])
        if data is None:
            raise ArchiveMissing(ref)
        if hashlib.sha256(data).hexdigest() != ref["digest"]:
            raise ArchiveAltered()
        # a folder per load: work still reading an evicted version keeps its files
        folder = Path(tempfile.mkdtemp(prefix=ref["digest"][:16] + "-", dir=self._root))
        try:
            unpack(data, folder, self.limits)
            return folder, self._prepare(ref, folder)
        except FornaceError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            problems = exc.problems if isinstance(exc, PackageError) else [str(exc)]
            raise PackageError([p.replace(str(folder) + "/", "") for p in problems]) from None

    def _keep(self, digest: str, loaded: tuple[Path, T]) -> tuple[Path, T]:
        """Keep a loaded version (the one kept already, if another thread's came
        first) and forget the least recently used past ``keep``."""
        evicted = []
        with self._lock:
            if digest in self._kept:
                evicted.append(loaded[0])
                loaded = self._kept[digest]
            else:
                self._kept[digest] = loaded
            while len(self._kept) > self.keep:
                _, (folder, _prepared) = self._kept.popitem(last=False)
                if self._remove_evicted:
                    evicted.append(folder)
        for folder in evicted:
            shutil.rmtree(folder, ignore_errors=True)
        return loaded

