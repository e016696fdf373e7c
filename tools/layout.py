#!/usr/bin/env python3
"""The code's layout in figures (not a test): folders, modules and lines per
service package, the modules over the size rule, and the conductor's floors
and arrows counted from its imports (lazy and ``TYPE_CHECKING`` ones too).

    python tools/layout.py              # this checkout
    python tools/layout.py --root DIR   # another one (e.g. a worktree of main)

An *arrow* is one pair (part -> part) of the conductor's parts where the
first imports the second, a part being a top-level module or sub-package of ``conductor/``
(``dsl``, ``executors``, ``jobs``, ``daemon``, ...).  *Floors* are the longest chain of
arrows plus one (a circle counting as one part); an arrow inside a circle
runs both ways, so some of it runs back up.  The floors the conductor
declares are checked by ``tests/common/test_import_rules.py``.
"""
from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

PACKAGES = ("common", "api", "conductor", "agent", "cli")
SIZE_RULE = 500


def module_of(path: Path, root: Path) -> str:
    parts = ["fornace", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, root: Path) -> set[str]:
    """Every fornace module ``path`` names in an import, relative ones resolved."""
    package = ["fornace", *path.relative_to(root).parent.parts]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("fornace.")}


def part(module: str) -> str | None:
    """The conductor part a module belongs to, or None outside the conductor."""
    bits = module.split(".")
    if bits[:2] != ["fornace", "conductor"] or len(bits) < 3:
        return None
    return bits[2]


def conductor_graph(root: Path) -> dict[str, set[str]]:
    parts = {p.stem if p.is_file() else p.name
             for p in (root / "conductor").iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    graph: dict[str, set[str]] = {name: set() for name in parts}
    for path in (root / "conductor").rglob("*.py"):
        source = part(module_of(path, root))
        if source is None:
            continue
        for target in map(part, imported(path, root)):
            if target in parts and target != source:
                graph[source].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected parts of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each part's floor: 1 + the longest chain below it (circles as one)."""
    group_of = {node: frozenset({node}) for node in graph}
    for group in circles(graph):
        for node in group:
            group_of[node] = frozenset(group)
    memo: dict[frozenset, int] = {}

    def height(group: frozenset) -> int:
        if group not in memo:
            memo[group] = 0   # a guard; circles are merged, so never read
            below = {group_of[t] for n in group for t in graph[n]} - {group}
            memo[group] = 1 + max((height(g) for g in below), default=0)
        return memo[group]

    return {node: height(group_of[node]) for node in graph}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    root = parser.parse_args().root.resolve()
    print(f"{'package':<10} {'folders':>7} {'modules':>7} {'lines':>7} {'median':>6} {'largest'}")
    over = []
    for package in PACKAGES:
        paths = [p for p in (root / package).rglob("*.py")
                 if "migrations" not in p.parts and "__pycache__" not in p.parts]
        sizes = sorted((len(p.read_text(encoding="utf-8").splitlines()), p) for p in paths)
        folders = {p.parent for p in paths}
        median = sizes[len(sizes) // 2][0] if sizes else 0
        big = sizes[-1] if sizes else (0, root)
        print(f"{package:<10} {len(folders):>7} {len(paths):>7} {sum(s for s, _ in sizes):>7} "
              f"{median:>6} {big[1].relative_to(root)} ({big[0]})")
        over += [(s, p) for s, p in sizes if s > SIZE_RULE]
    print(f"\nmodules over {SIZE_RULE} lines:")
    for size, path in sorted(over, reverse=True):
        print(f"  {size:>5} {path.relative_to(root)}")
    graph = conductor_graph(root)
    level = floors(graph)
    arrows = sorted((s, t) for s, targets in graph.items() for t in targets)
    upward = [(s, t) for s, t in arrows if level[t] >= level[s]]
    print(f"\nconductor: {len(graph)} parts, {max(level.values(), default=0)} floors, "
          f"{len(arrows)} arrows, {len(upward)} inside circles")
    by_floor = defaultdict(list)
    for node, height in level.items():
        by_floor[height].append(node)
    for height in sorted(by_floor, reverse=True):
        print(f"  floor {height}: {' '.join(sorted(by_floor[height]))}")
    for group in circles(graph):
        print(f"  circle: {' '.join(sorted(group))}")
    for source, target in upward:
        print(f"  inside a circle: {source} -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
