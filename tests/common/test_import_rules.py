"""The layout's import rules, read from the source (every import, lazy ones too).

``common`` imports none of the others; ``api`` and ``conductor`` never import
each other; ``agent`` imports only ``common``; ``cli`` is the only package that
imports the services. Nothing imports the old top-level names (``api``,
``conductor``, ``agent``): the one import name is ``fornace``.

Inside the conductor, modules stand on floors (see ``conductor/__init__.py``)
and import only from their own floor or those below; its ``dsl/`` imports
nothing but itself, pure parts of ``common`` and pure libraries.
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


# The conductor's floors, bottom to top (``conductor/__init__.py`` says why).  A
# module is on the floor naming its first name below ``fornace.conductor``; any
# other (the daemon, config, package loading) is on the top floor.
CONDUCTOR_FLOORS = [
    ("dsl", {"dsl"}),
    ("executors", {"executors"}),
    ("round", {"templates", "plans", "dispatch", "session", "gcpolicy",
               "workflowfiles", "workflowcheck"}),
    ("jobs", {"jobs"}),
    ("service", set()),
]
# what dsl/ may import besides itself: pure libraries and pure parts of common
DSL_MAY_IMPORT = ("__future__", "base64", "collections", "dataclasses", "difflib",
                  "functools", "json", "keyword", "operator", "random", "re", "string",
                  "typing", "urllib.parse", "lxml", "jsonpath_ng", "fornace.common.contract",
                  "fornace.common.cursor", "fornace.common.errors", "fornace.common.jsonlimits",
                  "fornace.common.secrets", "fornace.common.tracetext")


def floor_of(module: str) -> int:
    """The floor of a ``fornace.conductor`` module (the package itself: the bottom)."""
    parts = module.split(".")
    if len(parts) < 3:
        return 0
    for number, (_, names) in enumerate(CONDUCTOR_FLOORS):
        if parts[2] in names:
            return number
    return len(CONDUCTOR_FLOORS) - 1


def floor_violations() -> list[str]:
    """Imports (lazy ones too) of a conductor module from a floor above its own."""
    bad = []
    for path in sources("conductor"):
        where, mine = path.relative_to(ROOT), floor_of(module_name(path))
        for line, module in imports(path):
            if module.startswith("fornace.conductor.") and floor_of(module) > mine:
                bad.append(f"{where}:{line} imports {module} ({CONDUCTOR_FLOORS[mine][0]} "
                           f"below {CONDUCTOR_FLOORS[floor_of(module)][0]})")
    return bad


def runtime_imports(path: Path) -> list[tuple[int, str]]:
    """Like :func:`imports`, without those under ``if TYPE_CHECKING:`` (names only)."""
    found = []
    pending = list(ast.parse(path.read_text(encoding="utf-8"), str(path)).body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found += imports_of(node, path)
        else:
            pending += [child for child in ast.iter_child_nodes(node)
                        if isinstance(child, ast.stmt)]
    return sorted(found)


def impure_dsl_imports() -> list[str]:
    bad = []
    for path in sources("conductor/dsl"):
        for line, module in runtime_imports(path):
            if not module.startswith("fornace.conductor.dsl") and not any(
                    module == allowed or module.startswith(allowed + ".")
                    for allowed in DSL_MAY_IMPORT):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return bad


def test_the_conductor_imports_only_downward():
    assert floor_violations() == []


def test_the_dsl_is_pure():
    """No I/O (no os, files, sockets, processes, logging, clocks) and nothing of
    the rest of the conductor: what it needs is handed in (``dsl/context.py``)."""
    assert impure_dsl_imports() == []


def test_the_floor_rule_sees_a_violation(tmp_path, monkeypatch):
    """Upward imports, plain, lazy and relative, and impure imports of the DSL."""
    executors, dsl = tmp_path / "conductor" / "executors", tmp_path / "conductor" / "dsl"
    executors.mkdir(parents=True)
    dsl.mkdir()
    (executors / "bad.py").write_text(
        "from fornace.conductor.executors import base\n"
        "from fornace.conductor.dsl.pending import Action\n"
        "def f():\n    from fornace.conductor.jobs.lifecycle import run_job\n"
        "from ..config import cloud_dir\n")
    (dsl / "bad.py").write_text(
        "import os\nfrom typing import TYPE_CHECKING\nfrom . import engine\n"
        "if TYPE_CHECKING:\n    from pathlib import Path\n"
        "def g():\n    from fornace.conductor.templates import TemplateStore\n"
        "from fornace.common.db import engine\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert floor_violations() == [
        "conductor/dsl/bad.py:7 imports fornace.conductor.templates (dsl below round)",
        "conductor/dsl/bad.py:7 imports fornace.conductor.templates.TemplateStore "
        "(dsl below round)",
        "conductor/executors/bad.py:4 imports fornace.conductor.jobs.lifecycle "
        "(executors below jobs)",
        "conductor/executors/bad.py:4 imports fornace.conductor.jobs.lifecycle.run_job "
        "(executors below jobs)",
        "conductor/executors/bad.py:5 imports fornace.conductor.config (executors below service)",
        "conductor/executors/bad.py:5 imports fornace.conductor.config.cloud_dir "
        "(executors below service)",
    ]
    assert impure_dsl_imports() == [
        "conductor/dsl/bad.py:1 imports os",
        "conductor/dsl/bad.py:7 imports fornace.conductor.templates",
        "conductor/dsl/bad.py:7 imports fornace.conductor.templates.TemplateStore",
        "conductor/dsl/bad.py:8 imports fornace.common.db",
        "conductor/dsl/bad.py:8 imports fornace.common.db.engine",
    ]
