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


# The package's rooms from the bottom up: a module may import its own layer and the ones below, never one above,
# so each room reads without the rooms that use it. Derived from the code (tests/test_imports.py lists what each
# room imports when it fails). A new top-level module or room must be placed here.
LAYERS: list[tuple[str, ...]] = [
    (
        "regularfile",
        "safejson",
        "printable",
        "findings",
        "findings_text",
    ),  # reading files safely, the findings
    # contract and its words
    (
        "dump",
        "eager",
        "childproc",
        "userscript",
        "launch",
        "numpy_warnings",
        "pyadapter",
    ),  # dump reading and process tools (where the program started, what NumPy warned); the public API
    ("pictures",),  # the op graph and health timeline drawn from a dump, and the report page
    ("capture",),  # NanGuard / guard_step and the bundle format
    ("cause", "fixes"),  # why, from findings + a bundle; the fixes for a cause
    ("replay",),  # rebuild and rerun a bundle's step, locate it (makes pictures and the cause)
    ("evaluate",),  # the corpus evaluation, run by `nanlens eval`
    ("server",),  # the language server
    ("commands",),  # the CLI verbs
    ("cli", "__main__"),  # the entry points
]
# Imports that run up a layer on purpose, each with the reason: (importing room, imported module).
UPWARD_BY_DESIGN: dict[tuple[str, str], str] = {
    ("capture", "pyadapter.replay.scene"): "locate at the scene: when a step fails in training, NanGuard and "
    "guard_step re-run it right there under a dump (lazily, only then) so the bundle carries its findings",
    (
        "capture",
        "pyadapter.replay.window",
    ): "the learning-rate search at the scene: on a divergence the guard "
    "replays its window from the state copy it holds in memory (lazily, only on a failing step)",
    (
        "capture",
        "pyadapter.cause",
    ): "the cause in the stop message at the scene (lazily, only on a failing step)",
    ("capture", "pyadapter.cause.classify"): "which cause to search the window for, at the scene (lazily)",
    (
        "capture",
        "pyadapter.replay.stateful_random",
    ): "the scene's message names the unseeded random draws its "
    "re-run could not repeat (lazily, only on a failing step)",
}


def room_of(module: str) -> str:
    """`pyadapter.replay.scene` -> `replay`; a top-level module is its own room; the package itself is `pyadapter`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_imports(added: dict[str, Path] | None = None) -> tuple[list[str], set[tuple[str, str]]]:
    """The upward imports not listed in UPWARD_BY_DESIGN, and the listed ones in use; ``added``: more modules
    (name -> file) to check as if they were in the package."""
    layer = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")} | (added or {})
    unplaced = sorted({room_of(m) for m in files} - set(layer))
    assert unplaced == [], f"rooms with no layer in LAYERS: {unplaced}"
    bad, used = [], set()
    for name, path in sorted(files.items()):
        for target in sorted(imports_of(path, set(files))):
            if layer[room_of(target)] <= layer[room_of(name)]:
                continue
            key = (room_of(name), target)
            if key in UPWARD_BY_DESIGN:
                used.add(key)
            else:
                bad.append(f"{name} -> {target}")
    return bad, used


def test_no_module_imports_a_higher_layer() -> None:
    bad, used = upward_imports()
    assert bad == [], (
        "upward imports (import down, take a callback, or move the shared piece down): " + "; ".join(bad)
    )
    assert used == set(UPWARD_BY_DESIGN), (
        f"listed as by design but no longer imported: {set(UPWARD_BY_DESIGN) - used}"
    )


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The check must be able to fail: a lazy import of the server from inside a dump module is caught."""
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from pyadapter.server import render\n", encoding="utf-8")
    bad, _ = upward_imports({"pyadapter.dump.planted": planted})
    assert bad == ["pyadapter.dump.planted -> pyadapter.server.render"]
