"""The layout's import rules, read from the source (every import, lazy ones too).

``common`` imports none of the others; ``api`` and ``conductor`` never import
each other; ``agent`` imports only ``common``; ``cli`` is the only package that
imports the services. Nothing imports the old top-level names (``api``,
``conductor``, ``agent``): the one import name is ``fornace``.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "api", "conductor", "agent", "cli")
# package -> the fornace packages it may import (besides itself)
ALLOWED = {
    "common": set(),
    "api": {"common"},
    "conductor": {"common"},
    "agent": {"common"},
    "cli": {"common", "api", "conductor", "agent"},
}
OLD_NAMES = {"api", "conductor", "agent", "common", "cli"}


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in one file, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = ["fornace", *path.relative_to(ROOT).parent.parts]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.append((node.lineno, module))
            if node.module is None or node.level:  # from . import x: x may be a module
                found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return sorted(found)


def sources(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "migrations" not in p.parts)


def violations(package: str) -> list[str]:
    bad = []
    for path in sources(package):
        where = path.relative_to(ROOT)
        for line, module in imports(path):
            parts = module.split(".")
            if parts[0] in OLD_NAMES:
                bad.append(f"{where}:{line} imports {module} (the import name is fornace.*)")
            elif parts[0] == "fornace" and len(parts) > 1 and parts[1] in PACKAGES:
                if parts[1] != package and parts[1] not in ALLOWED[package]:
                    bad.append(f"{where}:{line} imports {module}")
    return bad


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_follow_the_layout(package):
    assert violations(package) == []


def test_the_rules_see_a_violation(tmp_path, monkeypatch):
    """The reader finds plain, from-, relative and function-level imports."""
    fake = tmp_path / "common"
    fake.mkdir()
    (fake / "bad.py").write_text("import fornace.api.store\n"
                                 "def f():\n    from fornace.conductor import session\n"
                                 "from ..agent import service\nimport conductor.daemon\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert violations("common") == [
        "common/bad.py:1 imports fornace.api.store",
        "common/bad.py:3 imports fornace.conductor",
        "common/bad.py:4 imports fornace.agent",
        "common/bad.py:4 imports fornace.agent.service",
        "common/bad.py:5 imports conductor.daemon (the import name is fornace.*)",
    ]


def test_tests_and_tools_use_the_one_import_name():
    bad = []
    for folder in ("tests", "tools"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, module in imports(path):
                if module.split(".")[0] in OLD_NAMES:
                    bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert bad == []
