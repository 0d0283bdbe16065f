"""The package's modules depend on each other without a circle: each room can be read on its own. Every import
counts, also the lazy ones inside functions (they are dependencies all the same); imports under TYPE_CHECKING (type
names only) do not. Runs without TensorFlow."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "pyadapter"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """pyadapter modules `path` imports anywhere (not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()

    def add(name: str) -> None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name:
            found.add(name)

    type_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    for node in [tree]:
        for child in ast.walk(node):
            if id(child) in type_only:
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                for alias in child.names:
                    add(f"{child.module}.{alias.name}")
    return found


def test_no_import_circle_in_pyadapter() -> None:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    graph = {name: imports_of(path, modules) - {name} for name, path in files.items()}
    # A package imports its own __init__ chain; only module-to-module edges between different modules count.
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target.startswith(node + ".") or node.startswith(target + "."):
                continue  # a package and its own submodules
            if state.get(target) == 1:
                cycles.append(stack[stack.index(target) :] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert cycles == [], "import circles: " + "; ".join(" -> ".join(c) for c in cycles)
