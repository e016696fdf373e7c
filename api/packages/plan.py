"""What moving an environment from one package version to another changes.

Both archives are unpacked (with the upload's limits) and compared file by
file: files added, removed and changed, a changed text file with its unified
diff (at most :data:`DIFF_LINES` lines each), and the service types the
package's ``types.json`` adds, removes or changes.
"""
from __future__ import annotations

import difflib
import tempfile
from pathlib import Path
from typing import Any

from fornace.common.jsonlimits import JsonLimitError, loads
from fornace.common.packages.archive import PackageLimits, unpack

DIFF_LINES = 400   # of one file's unified diff; past that a note says how many more


def _files(data: bytes | None, limits: PackageLimits) -> dict[str, bytes]:
    if data is None:
        return {}
    with tempfile.TemporaryDirectory(prefix="fornace-plan-") as folder:
        names = unpack(data, Path(folder), limits)
        root = Path(folder)
        return {name: (root / name).read_bytes() for name in names
                if (root / name).is_file()}


def _text(data: bytes) -> list[str] | None:
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None


def _diff(name: str, before: bytes, after: bytes) -> list[str]:
    old, new = _text(before), _text(after)
    if old is None or new is None:
        return [f"binary file {name} changed ({len(before)} -> {len(after)} bytes)"]
    lines = list(difflib.unified_diff(old, new, f"a/{name}", f"b/{name}", lineterm=""))
    if len(lines) > DIFF_LINES:
        lines = lines[:DIFF_LINES] + [f"... {len(lines) - DIFF_LINES} more lines"]
    return lines


def _types(files: dict[str, bytes]) -> dict[str, Any]:
    try:
        document = loads(files.get("types.json", b"{}").decode("utf-8"), source="types.json")
        types = document.get("types", {}) if isinstance(document, dict) else {}
    except (ValueError, JsonLimitError):
        types = {}
    return types if isinstance(types, dict) else {}


def package_changes(before: bytes | None, after: bytes,
                    limits: PackageLimits = PackageLimits()) -> dict[str, Any]:
    """``{"files": {"added", "removed", "changed": [{"file", "diff"}], "unchanged"},
    "types": {"added", "removed", "changed"}}`` from archive ``before`` (None:
    the environment had no version of the package) to ``after``."""
    old, new = _files(before, limits), _files(after, limits)
    changed = [{"file": name, "diff": _diff(name, old[name], new[name])}
               for name in sorted(old.keys() & new.keys()) if old[name] != new[name]]
    old_types, new_types = _types(old), _types(new)
    return {
        "files": {"added": sorted(new.keys() - old.keys()),
                  "removed": sorted(old.keys() - new.keys()),
                  "changed": changed,
                  "unchanged": len(old.keys() & new.keys()) - len(changed)},
        "types": {"added": sorted(new_types.keys() - old_types.keys()),
                  "removed": sorted(old_types.keys() - new_types.keys()),
                  "changed": sorted(n for n in old_types.keys() & new_types.keys()
                                    if old_types[n] != new_types[n])},
    }
