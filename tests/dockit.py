"""Running the docs' examples as written: the literal blocks of a page (commands,
files) and a shell for its commands against a running Fornace.

``tests/system/test_readme.py`` runs README's tour and the quick start;
``tests/cli/test_new_type.py`` the authors' walk-through of a new type."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def literal_block_after(text: str, marker: str) -> list[str]:
    """The lines of the ``::`` block that follows the paragraph holding ``marker``
    (continuation lines ending in a backslash joined)."""
    start = text.index(marker)
    lines = _block(text, text.index("::\n\n", start) + 4)
    joined = "\n".join(lines).replace("\\\n", " ")
    return [line for line in joined.splitlines() if line.strip()]


def file_blocks(text: str, folder: str) -> dict[str, str]:
    """The files a page shows below ``folder``: each ``::`` block whose paragraph
    names, first in double back-quotes, a path in ``folder``; unindented."""
    files = {}
    named = re.compile(r"``(" + re.escape(folder) + r"/[\w./-]+)``")
    at = text.find("::\n\n")
    while at != -1:
        paragraph = text[text.rfind("\n\n", 0, at) + 2:at]
        found = named.search(paragraph)
        if found:
            files[found.group(1)] = "\n".join(_block(text, at + 4)).strip("\n") + "\n"
        at = text.find("::\n\n", at + 4)
    return files


def _block(text: str, start: int) -> list[str]:
    """The lines of the indented block beginning at ``start`` (after its ``::``
    and blank line), unindented; it ends at the first unindented line."""
    lines = []
    for line in text[start:].splitlines():
        if line and not line.startswith("    "):
            break
        lines.append(line[4:])
    return lines


def shell(command: str, url: str, home: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``command`` in bash (``-euo pipefail``) with the test's Python's ``fornace``
    first on PATH, FORNACE_URL the box's, HOME the test's own."""
    env = {**os.environ, "HOME": str(home), "FORNACE_URL": url,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
