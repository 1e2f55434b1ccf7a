"""The studio's import graph read from source (AST): modules, the imports between them, loops.

Every import counts, at module level or inside a function: an import deferred into a
function to close a loop is still a loop.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    path: Path
    line: int


def module_name(root: Path, path: Path) -> str:
    """`studio.core.config.schema` for ROOT/studio/core/config/schema.py (packages without __init__)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path, package: str = "studio") -> dict[str, Path]:
    return {module_name(root, p): p for p in sorted((root / package).rglob("*.py"))}


def _resolve(known: dict[str, Path], name: str) -> str | None:
    """The longest known module that `name` is or lies inside (an imported class resolves to its module)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def edges(root: Path, package: str = "studio") -> list[Edge]:
    known = modules(root, package)
    found: list[Edge] = []
    for source, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = source.split(".")
                    anchor = anchor if is_package else anchor[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from pkg import module` names the module; `from module import Class` the module.
                targets = [f"{base}.{alias.name}" for alias in node.names]
            for name in targets:
                target = _resolve(known, name)
                if target is not None and target != source:
                    found.append(Edge(source, target, path, node.lineno))
    return found


def loops(graph_edges: list[Edge]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for edge in graph_edges:
        graph.setdefault(edge.source, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                group.append(item)
                if item == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


def feature_of(module: str, wing: str) -> str | None:
    """`dataset` for studio.<wing>.dataset.x; None for the wing's root modules."""
    parts = module.split(".")
    prefix = ["studio", wing]
    if parts[:2] != prefix or len(parts) < 4:
        return None
    return parts[2]
