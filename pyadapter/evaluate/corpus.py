"""The zoo corpus: which files are programs, which line each marks as the origin, and how each is run.

A program is a top-level ``zoo_*.py`` file of the zoo folder. Its origin is the one ``# ORIGIN`` comment found
in the program itself or in the zoo-local modules it imports (for a bug that lives in a helper module). A program
that trains with ``NanGuard``/``guard_step`` is run with capture; any other program is run with a dump.
"""

from __future__ import annotations

import ast
import fnmatch
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Method = Literal["capture", "dump"]

PROGRAM_GLOB = "zoo_*.py"
MARKER = "ORIGIN"
_CAPTURE_CALLS = {"NanGuard", "guard_step"}


class CorpusError(ValueError):
    """The zoo folder cannot be read as a corpus; the message is one line for the user."""


@dataclass(frozen=True)
class Marker:
    """A ``# ORIGIN`` comment: the line a user must fix."""

    file: Path
    line: int
    note: str  # the comment's text after ``ORIGIN``, e.g. ": log(0) = -inf once ..."


@dataclass(frozen=True)
class Program:
    name: str  # the file's stem, e.g. "zoo_log_of_zero"
    path: Path
    method: Method
    origin: Marker | None
    problem: str | None = None  # why the program cannot be scored (no marker, several markers, unreadable)
    title: str = ""  # the docstring's first line without its "Zoo: " prefix, e.g. "log of zero in a ..."


def origin_markers(path: Path) -> list[Marker]:
    """Every ``# ORIGIN`` comment in a Python file (comments only: a docstring mentioning ORIGIN is not one)."""
    source = path.read_text(encoding="utf-8")
    markers = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type != tokenize.COMMENT:
                continue
            text = token.string.lstrip("#").strip()
            if text == MARKER or (text.startswith(MARKER) and not text[len(MARKER)].isalnum()):
                markers.append(Marker(path.resolve(), token.start[0], text[len(MARKER):].strip(" :")))
    except (tokenize.TokenError, SyntaxError):
        pass  # the program itself will fail to run and be reported then
    return markers


def local_imports(program: Path, zoo_dir: Path) -> list[Path]:
    """Zoo-local modules a program imports, followed transitively (resolved from the program's folder)."""
    seen: list[Path] = []
    queue = [program]
    root = zoo_dir.resolve()
    while queue:
        current = queue.pop()
        try:
            tree = ast.parse(current.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
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
    """"capture" when the program calls NanGuard or guard_step, else "dump"."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return "dump"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in _CAPTURE_CALLS:
                return "capture"
    return "dump"


def title_of(path: Path) -> str:
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
    except (OSError, UnicodeDecodeError) as exc:
        return Program(path.stem, path, "dump", None, f"cannot read {path.name}: {exc}")
    problem = None
    origin = markers[0] if len(markers) == 1 else None
    if not markers:
        problem = "no # ORIGIN marker in the program or the zoo modules it imports"
    elif len(markers) > 1:
        where = ", ".join(f"{m.file.name}:{m.line}" for m in markers)
        problem = f"{len(markers)} # ORIGIN markers ({where}); a program must mark exactly one line"
    return Program(path.stem, path, run_method(path), origin, problem, title_of(path))


def matches(name: str, patterns: list[str]) -> bool:
    """A program is selected by a glob (``zoo_sqrt*``) or, without glob characters, by a substring."""
    for pattern in patterns:
        if any(ch in pattern for ch in "*?["):
            if fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(name + ".py", pattern):
                return True
        elif pattern.removesuffix(".py") in name:
            return True
    return False


def discover(zoo_dir: str | Path, only: list[str] | None = None) -> list[Program]:
    """The zoo's programs in name order, filtered by ``only`` patterns (comma-separated lists allowed)."""
    root = Path(zoo_dir)
    if not root.is_dir():
        raise CorpusError(f"{root} is not a folder")
    paths = sorted(root.glob(PROGRAM_GLOB))
    if not paths:
        raise CorpusError(f"no {PROGRAM_GLOB} programs in {root}")
    patterns = [p.strip() for item in (only or []) for p in item.split(",") if p.strip()]
    if patterns:
        paths = [p for p in paths if matches(p.stem, patterns)]
        if not paths:
            raise CorpusError(f"no program in {root} matches --only {','.join(patterns)}")
    return [load_program(p, root) for p in paths]
