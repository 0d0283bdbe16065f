"""Training inside a Jupyter notebook: which ``.ipynb`` the kernel runs, which cells it ran, and where a frame is.

A kernel compiles each executed cell under a file name of its own: ipykernel names it after a hash of the
cell's source (``/tmp/ipykernel_<pid>/<hash>.py``), plain IPython ``<ipython-input-<n>-<hash>>``; the compiled
text sits in ``linecache.cache``. Stack frames (Python tracebacks, tfdbg2 op stacks) carry that name, which means
nothing outside the kernel. `NotebookInfo` records, for every cell executed so far, its source and the name it
was compiled under, so a frame ``(file, line)`` can be mapped to ``(notebook.ipynb, cell index, line in cell)``
later by matching the recorded source against the cells of the ``.ipynb`` on disk — in the kernel at capture
time or in another process reading a bundle's manifest.

The kernel learns its notebook the way the front end tells it: jupyter_server sets ``JPY_SESSION_NAME`` (the
notebook's path, absolute or relative to the server root) in the kernel's environment; VS Code sets
``__vsc_ipynb_file__`` in the user namespace. A kernel told neither looks in its own folder for the one notebook
that holds the cells it ran (`notebook_holding_cells`).

No TensorFlow here, and IPython is only looked at when it is already imported (a kernel always has it).
"""

from __future__ import annotations

import ast
import difflib
import linecache
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pyadapter.capture import integrity
from pyadapter.capture.notebook_file import (  # noqa: F401 - the notebook API, read from here too
    CodeCell,
    NotebookCell,
    NotebookError,
    _leading_blank_lines,
    _transform_cell,
    code_sha256,
    normalized_source,
    notebook_code_cells,
    read_notebook_cells,
    readable_cell,
    same_cell_text,
)
from pyadapter.findings import Finding, Findings, Frame, move_record, placed_records

MANIFEST_FORMAT = "nanlens.notebook/1"

# --------------------------------------------------------------------------------------------------------------
# What the kernel ran

# How alike an old execution's text and a saved cell must be for the saved cell to be its edited version.
_REPLACED = 0.6


@dataclass(frozen=True)
class ExecutedCell:
    """One cell execution: its source as sent by the front end, the file name the kernel compiled it under, and
    the compiled text when IPython transformed it (frames' line numbers count in that text)."""

    execution_count: int | None
    source: str
    file: str | None
    code: str | None = None

    @property
    def line_offset(self) -> int:
        """Lines to add to a compiled line number to get the line in the cell (IPython drops leading blank
        lines before compiling)."""
        if self.code is None:
            return 0
        return max(_leading_blank_lines(self.source) - _leading_blank_lines(self.code), 0)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "execution_count": self.execution_count,
            "file": self.file,
            "source": self.source,
        }
        if self.code is not None:
            out["code"] = self.code
        return out

    @classmethod
    def from_json(cls, data: Any) -> ExecutedCell:
        if not isinstance(data, dict) or not isinstance(data.get("source"), str):
            raise NotebookError("recorded notebook cell has no source text")
        count, file, code = data.get("execution_count"), data.get("file"), data.get("code")
        return cls(
            execution_count=count if isinstance(count, int) and not isinstance(count, bool) else None,
            source=data["source"],
            file=file if isinstance(file, str) and file else None,
            code=code if isinstance(code, str) else None,
        )


@dataclass
class NotebookInfo:
    """The notebook a kernel runs and every cell it executed so far (in execution order)."""

    path: Path
    sha256: str | None
    cells: list[ExecutedCell] = field(default_factory=list)
    # How the path was learned: "JPY_SESSION_NAME", "__vsc_ipynb_file__", FOUND_IN_FOLDER or "manifest".
    found_by: str = ""
    _disk: tuple[tuple[int, int], dict[str, tuple[int, ExecutedCell]], dict[int, int]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    # ---- JSON ----

    def to_manifest(self) -> dict[str, Any]:
        """For a bundle's manifest (``manifest["entry_script"]["notebook"]``)."""
        return {
            "format": MANIFEST_FORMAT,
            "path": str(self.path),
            "sha256": self.sha256,
            "found_by": self.found_by,
            "cells": [cell.to_json() for cell in self.cells],
        }

    @classmethod
    def from_manifest(cls, data: Any) -> NotebookInfo:
        """From `to_manifest` output (e.g. read from a bundle); raises `NotebookError` if malformed."""
        if not isinstance(data, dict) or not isinstance(data.get("path"), str) or not data["path"]:
            raise NotebookError("recorded notebook has no path")
        cells = data.get("cells", [])
        if not isinstance(cells, list):
            raise NotebookError("recorded notebook cells are not a list")
        sha = data.get("sha256")
        return cls(
            path=Path(data["path"]),
            sha256=sha if isinstance(sha, str) else None,
            cells=[ExecutedCell.from_json(cell) for cell in cells],
            found_by="manifest",
        )

    # ---- mapping frames ----

    def is_cell_file(self, file: str) -> bool:
        """Whether `file` is a name the kernel compiled one of the recorded cells under."""
        return bool(file) and any(_same_file(file, cell.file) for cell in self.cells if cell.file)

    def cell_location(self, file: str, line: int) -> tuple[str, int, int] | None:
        """``(ipynb path, cell index among all cells, line in the cell)`` for a frame in cell code; None when
        `file` is not a recorded cell file, the notebook cannot be read, or no cell of it has that source now."""
        if not file or not self.is_cell_file(file):
            return None
        try:
            by_file, lengths = self._assignments()
        except NotebookError:
            return None
        hit = by_file.get(file) or next((v for k, v in by_file.items() if _same_file(file, k)), None)
        if hit is None:
            return None
        index, executed = hit
        in_cell = int(line) + executed.line_offset
        if in_cell < 1 or in_cell > lengths.get(index, in_cell):
            return None
        return str(self.path), index, in_cell

    def unsaved_cells(self) -> list[ExecutedCell]:
        """Executions whose code no cell of the notebook on disk holds (edited and run, not saved); [] when the
        notebook cannot be read. An execution of an older version of a cell that was edited, run again and saved
        is not one: a saved cell much like it (`_REPLACED` of its text alike) ran after it (its saved count is
        higher), so the kernel's state came from the saved version."""
        try:
            code = [c for c in read_notebook_cells(self.path) if c.cell_type == "code"]
        except NotebookError:
            return []
        disk = {normalized_source(c.source) for c in code}
        unsaved = []
        for cell in self.cells:
            source = normalized_source(cell.source)
            if source in disk:
                continue
            count = cell.execution_count
            replaced = count is not None and any(
                saved.execution_count is not None
                and saved.execution_count > count
                # autojunk off: its heuristic drops characters frequent in a long cell (spaces, "e"), and an
                # edited 291-character cell then matched its old version at 0.30 instead of 0.96.
                and difflib.SequenceMatcher(
                    None, source, normalized_source(saved.source), autojunk=False
                ).ratio()
                >= _REPLACED
                for saved in code
            )
            if not replaced and not self._redefined_later(cell, disk):
                unsaved.append(cell)
        return unsaved

    def _redefined_later(self, cell: ExecutedCell, disk: set[str]) -> bool:
        """Whether a later execution, of code the saved notebook holds, defined every name `cell` defined: the
        user rewrote the cell (a new loss function in place of Keras's) and ran it again, so nothing of the old
        text is left in the kernel, however unlike the two texts are."""
        names = _defined_names(cell.source)
        if not names or cell.execution_count is None:
            return False
        return any(
            later.execution_count is not None
            and later.execution_count > cell.execution_count
            and normalized_source(later.source) in disk
            and names <= _defined_names(later.source)
            for later in self.cells
        )

    def cell_code(self, cell: int, line: int) -> str | None:
        """Line `line` (1-based) of cell `cell` of the notebook on disk, or None."""
        try:
            cells = read_notebook_cells(self.path)
        except NotebookError:
            return None
        if not 0 <= cell < len(cells):
            return None
        lines = cells[cell].source.splitlines()
        return lines[line - 1] if 0 < line <= len(lines) else None

    def _assignments(self) -> tuple[dict[str, tuple[int, ExecutedCell]], dict[int, int]]:
        """cell file -> (index of the notebook cell it ran from, its execution); cell index -> line count.

        Each execution is matched to the code cells of the notebook on disk with the same (normalized) source.
        Several candidates: the one whose saved execution count is this execution's, else the first after the
        cell matched for the previous execution (top-to-bottom running), else the first. A file run several
        times (same source, same name) maps to the cell of its latest execution."""
        stat = self.path.stat() if self.path.is_file() else None
        key = (stat.st_mtime_ns, stat.st_size) if stat else (-1, -1)
        if self._disk is not None and self._disk[0] == key:
            return self._disk[1], self._disk[2]
        disk = read_notebook_cells(self.path)
        candidates: dict[str, list[NotebookCell]] = {}
        for cell in disk:
            if cell.cell_type == "code":
                candidates.setdefault(normalized_source(cell.source), []).append(cell)
        by_file: dict[str, tuple[int, ExecutedCell]] = {}
        previous = -1
        for executed in self.cells:
            matches = candidates.get(normalized_source(executed.source))
            if not matches:
                continue
            chosen = next(
                (
                    c
                    for c in matches
                    if executed.execution_count is not None and c.execution_count == executed.execution_count
                ),
                None,
            )
            chosen = chosen or next((c for c in matches if c.index > previous), matches[0])
            previous = chosen.index
            if executed.file:
                by_file[executed.file] = (chosen.index, executed)
        lengths = {c.index: max(len(c.source.splitlines()), 1) for c in disk}
        self._disk = (key, by_file, lengths)
        return by_file, lengths


def _defined_names(source: str) -> set[str]:
    """The names a cell binds at its top level (functions, classes, assignments, imports); empty for a cell that
    does more than bind names (it may have changed state a later cell does not undo) or does not parse."""
    try:
        tree = ast.parse(normalized_source(source))
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring or a bare string
        else:
            return set()
    return names


def _same_file(a: str, b: str | None) -> bool:
    if not b:
        return False
    if a == b:
        return True
    if a.startswith("<") or b.startswith("<"):
        return False
    return os.path.normcase(os.path.normpath(a)) == os.path.normcase(os.path.normpath(b))


def cell_location(file: str, line: int, info: NotebookInfo | None = None) -> tuple[str, int, int] | None:
    """``(ipynb path, cell index, line in cell)`` for a frame at `file`:`line` in notebook cell code, using
    `info` (default: this kernel's `current_notebook()`); None when it is not cell code or cannot be mapped."""
    if info is None:
        info = current_notebook()
    return info.cell_location(file, line) if info is not None else None


def map_findings_to_notebook(findings: Findings, info: NotebookInfo | None) -> Findings:
    """Rewrites, in place, every finding (the origin and `findings.findings`) and every stack frame in kernel
    cell code to ``file=<ipynb>, cell=<index>, line=<line in cell>``; returns `findings`. Frames that cannot be
    mapped (the notebook changed, not cell code) are left as they are. `info` None: nothing changes."""
    if info is None or findings is None:
        return findings
    seen: set[int] = set()
    candidates: list[Finding | None] = [findings.origin, *findings.findings]
    for finding in candidates:
        if finding is None or id(finding) in seen:
            continue
        seen.add(id(finding))
        _map_location(finding, info)
        for frame in finding.stack:
            _map_location(frame, info)
    _map_records(findings, info)
    origin = findings.origin
    if origin is not None and origin.cell is None and info.is_cell_file(origin.file):
        _unsaved_origin(findings, origin, info)
    if origin is not None and origin.cell is not None and "origin_code" not in findings.extra:
        # The dump holds the kernel's file of the cell, not the notebook: the line shown under the origin comes
        # from the notebook's cell.
        code = info.cell_code(origin.cell, origin.line)
        if code is not None:
            findings.extra["origin_code"] = code
    return findings


def executed_place(file: str, line: int, info: NotebookInfo) -> tuple[str, int, str | None] | None:
    """("In [12]", line in that cell, the line's code) for a frame in cell code the kernel ran, as the kernel ran
    it (for code the saved notebook does not hold); None when `file` is not a recorded cell file."""
    executed = next((c for c in reversed(info.cells) if c.file and _same_file(file, c.file)), None)
    if executed is None:
        return None
    lines = executed.source.splitlines()
    in_cell = line + executed.line_offset
    run = f"In [{executed.execution_count}]" if executed.execution_count is not None else "a cell"
    return run, in_cell, lines[in_cell - 1] if 0 < in_cell <= len(lines) else None


def _unsaved_origin(findings: Findings, origin: Finding, info: NotebookInfo) -> None:
    """The origin is in code the kernel ran that no cell of the saved notebook holds (a cell edited and run, not
    saved): show its line from what the kernel ran, and say why it is not marked in a cell."""
    place = executed_place(origin.file, origin.line, info)
    if place is None:
        return
    run, in_cell, code = place
    if "origin_code" not in findings.extra and code is not None:
        findings.extra["origin_code"] = code
    # How the CLI names this cell's lines (`findings_text.kernel_place`): the run, as the user saw it.
    findings.extra.setdefault("kernel_cells", {})[origin.file] = {
        "run": run,
        "offset": in_cell - origin.line,
        "notebook": info.path.name,
    }
    warning = (
        f"the origin is in code the kernel ran ({run}, line {in_cell}) that the saved {info.path.name} does not "
        f"hold: {_UNSAVED_MARK}; a replay runs the saved cells"
    )
    warnings = findings.extra.setdefault("warnings", [])
    if warning not in warnings:  # mapping the same findings again adds nothing
        warnings.append(warning)


_UNSAVED_MARK = "save the notebook to see it marked in its cell"


def map_saved_since(findings: Findings, recorded: Any) -> Findings:
    """A bundle's findings whose origin is still in a kernel's cell file because the notebook was not saved when the
    step failed (JupyterLab saves every two minutes), mapped again against the notebook as saved now, from the
    cells the bundle recorded (`recorded`: ``manifest["entry_script"]["notebook"]``). In place; returns `findings`.
    A notebook still without that code keeps the findings, and their warning, as they were. The scan's records of
    ops up the origin's inputs (`placed_records`) still in a kernel's cell file are mapped whatever the origin is."""
    origin = findings.origin
    try:
        info = NotebookInfo.from_manifest(recorded)
    except NotebookError:
        return findings
    if (
        origin is None
        or origin.cell is not None
        or not info.is_cell_file(origin.file)
        or info.cell_location(origin.file, origin.line) is None
    ):
        # A bundle made before the scene mapped the records with the origin: the -inf mask of a ListNet loss was
        # the change line at the dead kernel's /tmp/ipykernel_.../....py:4 (s42e p5).
        _map_records(findings, info)
        return findings
    warnings = findings.extra.get("warnings")
    if isinstance(warnings, list):  # the capture's "save the notebook" warning: it is saved now
        findings.extra["warnings"] = [w for w in warnings if not (isinstance(w, str) and _UNSAVED_MARK in w)]
    findings.extra.pop("origin_code", None)  # shown from the saved cell from now on
    findings.extra.pop("origin_statement", None)
    findings.extra.pop("kernel_cells", None)
    return map_findings_to_notebook(findings, info)


def saved_cells_were_run(recorded: Any) -> bool:
    """Whether every code cell of the notebook as saved now holds code the kernel ran in the captured session (the
    cells the bundle recorded): then a re-entry runs the code that trained, though the file's hash is not the one
    recorded (the notebook was saved after the capture)."""
    try:
        info = NotebookInfo.from_manifest(recorded)
        cells = [c for c in read_notebook_cells(info.path) if c.cell_type == "code" and c.source.strip()]
    except NotebookError:
        return False
    ran = {normalized_source(cell.source) for cell in info.cells}
    return bool(cells) and all(normalized_source(cell.source) in ran for cell in cells)


def _map_records(findings: Findings, info: NotebookInfo) -> None:
    """The scan's records of ops up the origin's inputs (`placed_records`) in kernel cell code, placed at their
    cells as the origin is: the cause's change line is often one of them (the -inf mask of s42e p5)."""
    for record in placed_records(findings.extra):
        if isinstance(record.get("cell"), int):
            continue
        where = info.cell_location(record["file"], record["line"])
        if where is not None:
            move_record(record, where[0], where[1], where[2])


def _map_location(item: Finding | Frame, info: NotebookInfo) -> None:
    if item.cell is not None:
        return
    where = info.cell_location(item.file, item.line)
    if where is not None:
        item.file, item.cell, item.line = where


# --------------------------------------------------------------------------------------------------------------
# The live kernel


def _kernel_shell() -> Any:
    """The IPython shell of a Jupyter kernel in this process, else None. Never imports IPython."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    try:
        shell = ipython.get_ipython()
    except Exception:  # noqa: BLE001 - a half-initialized IPython
        return None
    if shell is None:
        return None
    if getattr(shell, "kernel", None) is not None:
        return shell
    return shell if any(k.__name__ == "ZMQInteractiveShell" for k in type(shell).__mro__) else None


def execution_count() -> int | None:
    """The kernel's count of cell runs (the ``In [n]`` of the cell running now), or None outside a kernel."""
    shell = _kernel_shell()
    count = getattr(shell, "execution_count", None) if shell is not None else None
    return count if isinstance(count, int) else None


def in_kernel() -> bool:
    """Whether this process is a Jupyter (IPython) kernel."""
    return _kernel_shell() is not None


def current_notebook_path() -> tuple[Path, str] | None:
    """``(path of the .ipynb, how it was learned)`` for this kernel, or None (not a kernel, or not told)."""
    shell = _kernel_shell()
    if shell is None:
        return None
    namespace = getattr(shell, "user_ns", None) or {}
    for found_by, value in (
        ("__vsc_ipynb_file__", namespace.get("__vsc_ipynb_file__")),
        ("JPY_SESSION_NAME", os.environ.get("JPY_SESSION_NAME")),
    ):
        if isinstance(value, str) and value:
            path = resolve_notebook_path(value)
            if path is not None:
                return path, found_by
    # Not told (an older jupyter_server, nbclient, a front end that sets neither): the kernel started in its
    # notebook's folder, and the notebook there holds the cells the kernel ran. A cell may have moved the kernel
    # since (``%cd workdir``, Colab's ``%cd /content/drive/...``): IPython's directory history ``_dh`` holds the
    # folder it started in and every one ``%cd`` went to.
    sources = [cell.source for cell in executed_cells(shell)]
    history = namespace.get("_dh")
    folders = [Path.cwd()]
    if isinstance(history, list):
        folders += [Path(d) for d in history if isinstance(d, str | os.PathLike)]
    for folder in dict.fromkeys(folders):
        path = notebook_holding_cells(folder, sources)
        if path is not None:
            return path, FOUND_IN_FOLDER
    return None


FOUND_IN_FOLDER = "cells in the kernel's folder"
_FOLDER_LIMIT = 64  # notebooks looked at in the folder (a data folder of thousands is not searched)
_NOTEBOOK_SIZE_LIMIT = 64 * 1024 * 1024
_folder_cache: dict[tuple[Any, ...], Path | None] = {}


def notebook_holding_cells(folder: Path, sources: list[str]) -> Path | None:
    """The one ``.ipynb`` in `folder` whose saved code cells hold the most of `sources` (the cells a kernel ran),
    when it holds at least half of them and no other notebook there holds as many; else None. A notebook is
    read as data, nothing in it runs. Cached on the folder's notebooks' sizes and times and on `sources`."""
    ran = {same_cell_text(s) for s in sources}
    ran.discard("")
    if not ran:
        return None
    try:
        names = sorted(
            e.name for e in os.scandir(folder) if e.name.lower().endswith(".ipynb") and e.is_file()
        )
    except OSError:
        return None
    if not names or len(names) > _FOLDER_LIMIT:
        return None
    stats = []
    for name in names:
        try:
            st = os.stat(folder / name)
        except OSError:
            continue
        stats.append((name, st.st_size, st.st_mtime_ns))
    key = (str(folder), tuple(stats), tuple(sorted(ran)))
    if key in _folder_cache:
        return _folder_cache[key]
    scores: list[tuple[int, frozenset[str], int, Path]] = []
    for name, size, mtime in stats:
        if size > _NOTEBOOK_SIZE_LIMIT:
            continue
        try:
            cells = read_notebook_cells(folder / name)
            saved = frozenset(same_cell_text(c.source) for c in cells if c.cell_type == "code")
        except NotebookError:
            continue
        scores.append((len(ran & saved), saved, mtime, folder / name))
    # The most cells held first; of notebooks with the same code ("Copy of train.ipynb" beside train.ipynb, as a
    # download from Colab or Drive leaves it), the one saved last: the kernel's front end saves the one it runs.
    scores.sort(key=lambda item: (-item[0], -item[2]))
    found = None
    if (
        scores
        and 2 * scores[0][0] >= len(ran)
        and (len(scores) == 1 or scores[1][0] < scores[0][0] or scores[1][1] == scores[0][1])
    ):
        found = Path(os.path.normpath(scores[0][3].absolute()))
    if len(_folder_cache) > 32:
        _folder_cache.clear()
    _folder_cache[key] = found
    return found


def resolve_notebook_path(name: str, cwd: str | os.PathLike[str] | None = None) -> Path | None:
    """The existing ``.ipynb`` `name` refers to: absolute; relative to `cwd` (default the current directory) or
    to one of its parents (jupyter_server gives paths relative to its root, the kernel runs in the notebook's
    folder); or, failing that, the file of that name in `cwd`. A ``file://`` URI is accepted."""
    if name.startswith("file:"):
        name = unquote(urlparse(name).path)
    given = Path(name).expanduser()
    if given.suffix.lower() != ".ipynb":
        return None
    if given.is_absolute():
        return given if given.is_file() else None
    base = Path(cwd) if cwd is not None else Path.cwd()
    base = base.absolute()
    for candidate in [base / given, *(parent / given for parent in base.parents), base / given.name]:
        if candidate.is_file():
            return Path(os.path.normpath(candidate))
    return None


def current_notebook() -> NotebookInfo | None:
    """This kernel's notebook and the cells it executed so far, or None outside a kernel / for a notebook the
    kernel was not told about (an untitled one). Cheap when IPython is not imported."""
    shell = _kernel_shell()
    if shell is None:
        return None
    located = current_notebook_path()
    if located is None:
        return None
    path, found_by = located
    try:
        sha = integrity.sha256_file(path)
    except OSError:
        sha = None
    return NotebookInfo(path=path, sha256=sha, cells=executed_cells(shell), found_by=found_by)


def kernel_cells() -> list[ExecutedCell] | None:
    """The cells this kernel executed so far, or None outside a kernel."""
    shell = _kernel_shell()
    return None if shell is None else executed_cells(shell)


def executed_cells(shell: Any) -> list[ExecutedCell]:
    """Every cell this shell stored in its history so far (execution order), with its compiled file name."""
    history = getattr(shell, "history_manager", None)
    raw = list(getattr(history, "input_hist_raw", []) or [])
    parsed = list(getattr(history, "input_hist_parsed", []) or [])
    compiler = getattr(shell, "compile", None)
    out = []
    for number in range(1, len(raw)):
        source = raw[number]
        transformed = parsed[number] if number < len(parsed) else source
        file, compiled = _compiled_name(compiler, source, transformed, number)
        code = compiled if compiled is not None else transformed
        out.append(
            ExecutedCell(
                execution_count=number,
                source=source,
                file=file,
                code=None if normalized_source(code) == normalized_source(source) else code,
            )
        )
    return out


def _compiled_name(
    compiler: Any, source: str, transformed: str, number: int
) -> tuple[str | None, str | None]:
    """The name the shell compiled a cell under and the text it cached there. History strips trailing newlines
    from what ran, so the names of a few variants are tried against linecache."""
    get_code_name = getattr(compiler, "get_code_name", None)
    if get_code_name is None:
        return None, None
    names = []
    for raw_variant, code_variant in _variants(source, transformed):
        try:
            name = get_code_name(raw_variant, code_variant, number)
        except Exception:  # noqa: BLE001 - a foreign compiler
            continue
        if isinstance(name, str) and name not in names:
            names.append(name)
    for name in names:
        entry = linecache.cache.get(name)
        if entry is not None and len(entry) >= 3 and isinstance(entry[2], list):
            cached = "".join(entry[2])
            if normalized_source(cached) == normalized_source(transformed):
                return name, cached
    return (names[0] if names else None), None


def _variants(source: str, transformed: str) -> Iterable[tuple[str, str]]:
    yield source, transformed
    yield source + "\n", transformed + "\n"
    yield source + "\n", transformed
    yield source, transformed + "\n"
