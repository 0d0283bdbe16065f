"""The user's code a cause may point into, read and parsed, never executed: the files the findings' stacks name,
the bundle's entry script (or notebook cells), and the local modules the entry script imports."""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path

from pyadapter.dump.layer_site import sibling_modules
from pyadapter.findings import Findings

MAX_SOURCE_BYTES = 4 << 20
MAX_UNITS = 64


@dataclass
class SourceUnit:
    """One parsed piece of user code: a .py file, or one code cell of a notebook (``cell`` set, ``file`` the .ipynb;
    line numbers count inside the cell)."""

    file: str
    cell: int | None
    text: str
    tree: ast.Module

    def line(self, number: int) -> str:
        lines = self.text.splitlines()
        return lines[number - 1] if 0 < number <= len(lines) else ""


def read_source(path: str) -> str | None:
    """The text of the source file `path`, or None. The entry script's path comes from the manifest (data): read
    regular files only (a FIFO or /dev/zero would block or never end) and only up to a source file's size."""
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > MAX_SOURCE_BYTES:
            return None
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def source_line(path: str, number: int) -> str | None:
    """Line `number` of the source file `path`, stripped (a regular file, up to a source file's size: a bundle names
    the path), or None."""
    text = read_source(path)
    lines = text.splitlines() if text is not None else []
    return lines[number - 1].strip() if 0 < number <= len(lines) else None


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def _units_of(path: str, ran: list[str] | None = None) -> list[SourceUnit]:
    if path.endswith(".ipynb"):
        from pyadapter.capture.notebook import NotebookError, notebook_code_cells, readable_cell

        try:
            cells = notebook_code_cells(path)
        except NotebookError:
            return []
        texts = as_run({cell.index: cell.raw for cell in cells}, ran or [])
        return [
            SourceUnit(path, cell.index, code, tree)
            for cell in cells
            if (tree := _parse(code := readable_cell(texts[cell.index]))) is not None
        ]
    if not path.endswith(".py"):
        return []
    text = read_source(path)
    tree = _parse(text) if text is not None else None
    return [SourceUnit(path, None, text, tree)] if text is not None and tree is not None else []


# How alike a run and a saved cell must be to be one cell edited (difflib's ratio: 1.0 the same text).
_SAME_CELL_EDITED = 0.6


def as_run(saved: dict[int, str], ran: list[str]) -> dict[int, str]:
    """Each saved code cell's text (by index) as the kernel last ran it. A cell edited and run again before the
    notebook was saved ran text the file does not hold: that run is the cell's code when it came after the last
    run of the saved text and is most like that cell (a line added to the data cell). `ran`: the sources the
    kernel executed, in order (the bundle's record); empty: the saved texts."""
    from difflib import SequenceMatcher

    from pyadapter.capture.notebook_file import same_cell_text

    out = dict(saved)
    if not ran:
        return out
    runs = [same_cell_text(text) for text in ran]
    wanted = {same_cell_text(text): index for index, text in saved.items()}
    last_exact = {index: -1 for index in saved}
    for position, run in enumerate(runs):
        if run in wanted:
            last_exact[wanted[run]] = position
    for position, (text, run) in enumerate(zip(ran, runs, strict=True)):
        if run in wanted or not run:
            continue
        alike = [
            (SequenceMatcher(None, same_cell_text(source), run).ratio(), index)
            for index, source in saved.items()
        ]
        ratio, index = max(alike, default=(0.0, -1))
        if ratio >= _SAME_CELL_EDITED and position > last_exact[index]:
            out[index] = text  # a later run of the same edit overwrites it: the last run is the code
    return out


def _local_imports(unit: SourceUnit) -> list[str]:
    """``import helpers`` / ``from data import load`` in a script: the sibling .py files they name."""
    return sibling_modules(unit.tree, os.path.dirname(unit.file))


def user_sources(
    findings: Findings, entry_script: str | None, ran_cells: list[str] | None = None
) -> list[SourceUnit]:
    """The user's code around a capture, entry script first, then the files the findings name, then local
    modules the entry script imports. Files that cannot be read or parsed are left out. A notebook's cells are
    read as its kernel last ran them (`as_run`; `ran_cells`, the executed sources the bundle recorded)."""
    paths: list[str] = []
    if entry_script:
        paths.append(os.path.abspath(entry_script))
    everything = ([findings.origin] if findings.origin else []) + list(findings.findings)
    for finding in everything:
        for file in [finding.file, *(frame.file for frame in finding.stack)]:
            if not file.startswith("<"):
                paths.append(os.path.abspath(file))
    units: list[SourceUnit] = []
    seen: set[str] = set()
    queue = list(dict.fromkeys(paths))
    while queue and len(units) < MAX_UNITS:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        found = _units_of(path, ran_cells if entry_script and path == os.path.abspath(entry_script) else None)
        units += found
        if entry_script and path == os.path.abspath(entry_script):
            for unit in found:
                queue += [p for p in _local_imports(unit) if p not in seen]
    return units


def called_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def calls(unit: SourceUnit) -> list[ast.Call]:
    """Every call in the unit, in source order."""
    found = [n for n in ast.walk(unit.tree) if isinstance(n, ast.Call)]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def keyword(node: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in node.keywords if k.arg == name), None)


def number(node: ast.expr | None) -> float | None:
    """A numeric literal (``0.05``, ``1e-3``, ``-2``), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = number(node.operand)
        return -inner if inner is not None else None
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        return float(node.value)
    return None


def parameters_of(units: list[SourceUnit], qualname: str | None, file: str | None = None) -> list[str] | None:
    """The positional parameter names of the function ``qualname`` ("train_step", "Trainer.step") as the user's
    code defines it (in ``file`` when given), ``self`` left out for a method; None when it is not found."""
    if not qualname or "<" in qualname:
        return None
    *owners, name = qualname.split(".")
    if file is not None and not any(os.path.abspath(u.file) == os.path.abspath(file) for u in units):
        file = None  # a bundle written before the file was unwrapped recorded TensorFlow's own (a bound tf.function)
    for unit in units:
        if file is not None and os.path.abspath(unit.file) != os.path.abspath(file):
            continue
        for node in ast.walk(unit.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                names = [a.arg for a in [*node.args.posonlyargs, *node.args.args]]
                return names[1:] if owners and names and names[0] in ("self", "cls") else names
    return None
