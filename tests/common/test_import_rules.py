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

ROOT = Path(__file__).resolve().parents[2]
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
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found += imports_of(node, path)
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
        "common/bad.py:3 imports fornace.conductor.session",
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


def module_name(path: Path) -> str:
    parts = ["fornace", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def load_time_imports(path: Path, known: set[str]) -> set[str]:
    """The fornace modules ``path`` imports when it is loaded: module level,
    outside ``if TYPE_CHECKING:`` (imports inside functions run later)."""
    found = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If):
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                pending += node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending += node.body + node.orelse + node.finalbody
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for _, module in imports_of(node, path):
                while module and module not in known:
                    module = module.rpartition(".")[0]
                if module:
                    found.add(module)
    return found


def imports_of(node: ast.AST, path: Path) -> list[tuple[int, str]]:
    package = ["fornace", *path.relative_to(ROOT).parent.parts]
    if isinstance(node, ast.Import):
        return [(node.lineno, alias.name) for alias in node.names]
    base = package[:len(package) - node.level + 1] if node.level else []
    module = ".".join(base + ([node.module] if node.module else []))
    return [(node.lineno, module)] + [(node.lineno, f"{module}.{alias.name}")
                                      for alias in node.names]


def test_no_module_imports_itself_back_at_load_time():
    """No circle of module-level imports (each one makes import order matter)."""
    paths = {module_name(p): p for package in PACKAGES for p in sources(package)}
    known = set(paths)
    graph = {name: load_time_imports(path, known) - {name} for name, path in paths.items()}
    for name, targets in graph.items():   # a package's own __init__ is loaded first anyway
        graph[name] = {t for t in targets if not name.startswith(t + ".")}
    circles, state = [], {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = "open"
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                circles.append(" -> ".join(trail[trail.index(target):] + [name, target]
                                           if target in trail else [name, target]))
            elif target not in state:
                visit(target, trail + [name])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    assert circles == []
