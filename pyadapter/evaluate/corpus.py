"""The zoo corpus: which files are programs, which line each marks as the origin, and how each is run.

A program is a top-level ``zoo_*.py`` file of the zoo folder, or a ``zoo_*.ipynb`` Jupyter notebook (run headless
in a real kernel, see `pyadapter.evaluate.notebook`). Its origin is the one ``# ORIGIN`` comment found in the
program itself (for a notebook: in one of its code cells, located by cell index and line in the cell) or in the
zoo-local modules it imports (for a bug that lives in a helper module). Its cause is the one ``# CAUSE: <kind>``
comment in the program itself (kind: op, divergence, data or precision; without one only the line is scored).
A program that trains with
``NanGuard``/``guard_step`` is run with capture; any other script is run with a dump (a notebook must use
capture).
"""

from __future__ import annotations

import ast
import fnmatch
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pyadapter.findings_text import place_text

Method = Literal["capture", "dump"]

PROGRAM_GLOB = "zoo_*.py"
NOTEBOOK_GLOB = "zoo_*.ipynb"
MARKER = "ORIGIN"
CAUSE_MARKER = "CAUSE"
CAUSE_KINDS = ("op", "divergence", "data", "precision")
_CAPTURE_CALLS = {"NanGuard", "guard_step"}


class CorpusError(ValueError):
    """The zoo folder cannot be read as a corpus; the message is one line for the user."""


@dataclass(frozen=True)
class Marker:
    """A ``# ORIGIN`` comment: the line a user must fix."""

    file: Path
    line: int  # in a notebook: the line within the cell (1-based)
    note: str  # the comment's text after ``ORIGIN``, e.g. ": log(0) = -inf once ..."
    cell: int | None = None  # in a notebook: the cell's 0-based index among all its cells (markdown included)


@dataclass(frozen=True)
class Program:
    name: str  # the file's stem, e.g. "zoo_log_of_zero"
    path: Path
    method: Method
    origin: Marker | None
    problem: str | None = None  # why the program cannot be scored (no marker, several markers, unreadable)
    title: str = ""  # the docstring's first line without its "Zoo: " prefix, e.g. "log of zero in a ..."
    cause: str | None = None  # the ``# CAUSE:`` kind (op, divergence, data, precision); None when not marked

    @property
    def is_notebook(self) -> bool:
        return self.path.suffix.lower() == ".ipynb"


def origin_markers(path: Path) -> list[Marker]:
    """Every ``# ORIGIN`` comment in a Python file or in the code cells of a notebook (comments only: a docstring
    or a markdown cell mentioning ORIGIN is not one)."""
    if _is_notebook(path):
        markers = []
        for index, source in _notebook_sources(path):
            markers.extend(_source_markers(source, path, cell=index))
        return markers
    return _source_markers(path.read_text(encoding="utf-8"), path)


def _source_markers(source: str, path: Path, cell: int | None = None) -> list[Marker]:
    markers = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type != tokenize.COMMENT:
                continue
            text = token.string.lstrip("#").strip()
            if text == MARKER or (text.startswith(MARKER) and not text[len(MARKER)].isalnum()):
                markers.append(Marker(path.resolve(), token.start[0], text[len(MARKER) :].strip(" :"), cell))
    except (tokenize.TokenError, SyntaxError):
        pass  # the program itself will fail to run and be reported then
    return markers


def cause_markers(path: Path) -> list[tuple[int, str]]:
    """Every ``# CAUSE: <kind>`` comment in a program (a notebook: in its code cells), as ``(line, kind)``; the kind
    is the first word after ``CAUSE:``, lowercased, whether or not it is one of `CAUSE_KINDS`."""
    sources = (
        [source for _, source in _notebook_sources(path)]
        if _is_notebook(path)
        else [path.read_text(encoding="utf-8")]
    )
    found = []
    for source in sources:
        try:
            for token in tokenize.generate_tokens(io.StringIO(source).readline):
                if token.type != tokenize.COMMENT:
                    continue
                text = token.string.lstrip("#").strip()
                if text.startswith(CAUSE_MARKER) and text[len(CAUSE_MARKER) :].lstrip().startswith(":"):
                    words = text[len(CAUSE_MARKER) :].lstrip()[1:].split()
                    found.append((token.start[0], words[0].strip(".,;:").lower() if words else ""))
        except (tokenize.TokenError, SyntaxError):
            pass
    return found


def _is_notebook(path: Path) -> bool:
    return path.suffix.lower() == ".ipynb"


def _notebook_sources(path: Path) -> list[tuple[int, str]]:
    """A notebook's code cells as Python, ``(cell index, source)``; raises OSError for an unreadable notebook."""
    from pyadapter.capture.notebook import NotebookError
    from pyadapter.evaluate.notebook import code_cell_sources

    try:
        return code_cell_sources(path)
    except NotebookError as exc:
        raise OSError(str(exc)) from None


def python_sources(path: Path) -> list[str]:
    """The Python a program runs: a script's text, or each code cell of a notebook."""
    if _is_notebook(path):
        return [source for _, source in _notebook_sources(path)]
    return [path.read_text(encoding="utf-8")]


def _trees(path: Path) -> list[ast.AST]:
    trees: list[ast.AST] = []
    try:
        sources = python_sources(path)
    except (OSError, UnicodeDecodeError):
        return []
    for source in sources:
        try:
            trees.append(ast.parse(source))
        except SyntaxError:
            continue
    return trees


def local_imports(program: Path, zoo_dir: Path) -> list[Path]:
    """Zoo-local modules a program imports, followed transitively (resolved from the program's folder)."""
    seen: list[Path] = []
    queue = [program]
    root = zoo_dir.resolve()
    while queue:
        current = queue.pop()
        nodes = [node for tree in _trees(current) for node in ast.walk(tree)]
        for node in nodes:
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            for name in names:
                for candidate in _module_files(root, name):
                    if candidate not in seen and candidate != program.resolve():
                        seen.append(candidate)
                        queue.append(candidate)
    return seen


def _module_files(root: Path, dotted: str) -> list[Path]:
    base = root.joinpath(*dotted.split("."))
    found = []
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            found.append(candidate.resolve())
    return found


def run_method(path: Path) -> Method:
    """ "capture" when the program calls NanGuard or guard_step, else "dump"."""
    for node in (node for tree in _trees(path) for node in ast.walk(tree)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in _CAPTURE_CALLS:
                return "capture"
    return "dump"


def title_of(path: Path) -> str:
    """The docstring's first line (a notebook: the markdown line that starts with "Zoo:"), without "Zoo:"."""
    if _is_notebook(path):
        from pyadapter.evaluate.notebook import first_markdown_line

        return first_markdown_line(path).removeprefix("Zoo:").strip().rstrip(".")
    try:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    except (OSError, SyntaxError, UnicodeDecodeError):
        return ""
    first = doc.strip().splitlines()[0] if doc.strip() else ""
    return first.removeprefix("Zoo:").strip().rstrip(".")


def load_program(path: Path, zoo_dir: Path) -> Program:
    path = path.resolve()
    try:
        markers = origin_markers(path)
        for module in local_imports(path, zoo_dir):
            markers.extend(origin_markers(module))
        causes = cause_markers(path)  # in the program itself, never in a helper module
    except (OSError, UnicodeDecodeError) as exc:
        return Program(path.stem, path, "dump", None, f"cannot read {path.name}: {exc}")
    problem = None
    origin = markers[0] if len(markers) == 1 else None
    if not markers:
        problem = "no # ORIGIN marker in the program or the zoo modules it imports"
    elif len(markers) > 1:
        where = "; ".join(place_text(m.file.name, m.line, m.cell) for m in markers)
        problem = f"{len(markers)} # ORIGIN markers ({where}); a program must mark exactly one line"
    cause = causes[0][1] if len(causes) == 1 else None
    if problem is None:  # no CAUSE marker at all: the line is scored, the cause is not
        if len(causes) > 1:
            problem = (
                f"{len(causes)} # CAUSE: markers (lines "
                + ", ".join(str(line) for line, _ in causes)
                + ("); a program must name exactly one cause")
            )
        elif causes and cause not in CAUSE_KINDS:
            problem = (
                f"# CAUSE: {cause or '(nothing)'} is not a cause kind (one of " + ", ".join(CAUSE_KINDS) + ")"
            )
    method = run_method(path)
    if problem is None and _is_notebook(path) and method != "capture":
        problem = "a notebook program must train with NanGuard or guard_step (a dump is run for scripts only)"
    return Program(
        path.stem, path, method, origin, problem, title_of(path), cause if cause in CAUSE_KINDS else None
    )


def matches(name: str, patterns: list[str], filename: str | None = None) -> bool:
    """A program is selected by a glob (``zoo_sqrt*``, ``*.ipynb``) or, without glob characters, by a substring
    of its name (a ``.py``/``.ipynb`` suffix is ignored)."""
    filename = filename or name + ".py"
    for pattern in patterns:
        if any(ch in pattern for ch in "*?["):
            if fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(filename, pattern):
                return True
        elif pattern.removesuffix(".py").removesuffix(".ipynb") in name:
            return True
    return False


def discover(zoo_dir: str | Path, only: list[str] | None = None) -> list[Program]:
    """The zoo's programs in name order, filtered by ``only`` patterns (comma-separated lists allowed)."""
    root = Path(zoo_dir)
    if not root.is_dir():
        raise CorpusError(f"{root} is not a folder")
    paths = sorted([*root.glob(PROGRAM_GLOB), *root.glob(NOTEBOOK_GLOB)], key=lambda p: (p.stem, p.suffix))
    if not paths:
        raise CorpusError(f"no {PROGRAM_GLOB} or {NOTEBOOK_GLOB} programs in {root}")
    patterns = [p.strip() for item in (only or []) for p in item.split(",") if p.strip()]
    if patterns:
        paths = [p for p in paths if matches(p.stem, patterns, p.name)]
        if not paths:
            raise CorpusError(f"no program in {root} matches --only {','.join(patterns)}")
    return [load_program(p, root) for p in paths]
