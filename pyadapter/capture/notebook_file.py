"""A notebook file on disk: its cells, and its code cells as a kernel would run them (magics turned into Python by
IPython when it is installed, else dropped or kept as their Python body). Reading a ``.ipynb`` never runs it.

No TensorFlow here."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyadapter.regularfile import open_regular

# Cell magics whose body is Python run by the magic: without IPython the body is kept, the magic line dropped.
# Notebooks with image outputs run to tens of MB; the cap only stops a file that is not a notebook at all.
MAX_NOTEBOOK_BYTES = 512 << 20
_PYTHON_BODY_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "python", "python3"})
# `%magic`, `!cmd`, `?name`, `name?`, `x = !cmd`, `x = %magic` (a line, possibly indented).
_MAGIC_LINE_RE = re.compile(r"^(?P<indent>[ \t]*)(?:[%!?]|[A-Za-z_][\w.]*\?{1,2}[ \t]*$)")
_ASSIGN_MAGIC_RE = re.compile(r"^(?P<indent>[ \t]*)[A-Za-z_][\w., \t]*=[ \t]*[%!]")
# `%time statement`: a line magic that runs its statement once, in the cell's namespace.
_TIMED_LINE_RE = re.compile(r"^[ \t]*%time[ \t]+(?P<statement>\S.*)$")


class NotebookError(ValueError):
    """A notebook file or a recorded notebook that cannot be read; the message is one line."""


# --------------------------------------------------------------------------------------------------------------
# The .ipynb on disk


@dataclass(frozen=True)
class NotebookCell:
    """One cell of an ``.ipynb``: its 0-based index among all cells, type, source and saved execution count."""

    index: int
    cell_type: str
    source: str
    execution_count: int | None = None


@dataclass(frozen=True)
class CodeCell:
    """A code cell ready to run as Python: `index` among all cells of the notebook, `source` with IPython
    magics and shell escapes made Python (line numbers kept where the transformation allows), `raw` as saved."""

    index: int
    source: str
    raw: str


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def read_notebook_cells(path: str | os.PathLike[str]) -> list[NotebookCell]:
    """Every cell of a version-4 ``.ipynb`` (markdown and raw cells too, so indices match the editor's).

    Raises `NotebookError` with a one-line reason for a missing, unreadable or malformed notebook."""
    p = Path(path)
    try:
        # A notebook named by a bundle or a finding may be any file: a FIFO would block, /dev/zero never end.
        with open_regular(p) as handle:
            raw = handle.read(MAX_NOTEBOOK_BYTES + 1)
        if len(raw) > MAX_NOTEBOOK_BYTES:
            raise NotebookError(f"{p}: the notebook is over {MAX_NOTEBOOK_BYTES >> 20} MB")
        text = raw.decode("utf-8")
    except OSError as error:
        raise NotebookError(f"{p}: cannot read the notebook: {_one_line(error.strerror or error)}") from None
    except UnicodeDecodeError:
        raise NotebookError(f"{p}: not a Jupyter notebook (not UTF-8 text)") from None
    from pyadapter import safejson

    try:
        data = safejson.loads(text)
    except ValueError as error:
        raise NotebookError(f"{p}: not a Jupyter notebook (not JSON: the file {_one_line(error)})") from None
    if not isinstance(data, dict):
        raise NotebookError(f"{p}: not a Jupyter notebook (the JSON is not an object)")
    version = data.get("nbformat")
    if "worksheets" in data or (isinstance(version, int) and not isinstance(version, bool) and version < 4):
        raise NotebookError(
            f"{p}: nbformat {version} notebooks are not supported; save it with Jupyter as version 4"
        )
    cells = data.get("cells")
    if not isinstance(cells, list):
        raise NotebookError(f'{p}: not a Jupyter notebook (no "cells" list)')
    out: list[NotebookCell] = []
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or not isinstance(cell.get("cell_type"), str):
            raise NotebookError(f"{p}: cell {index} is not a notebook cell (no cell_type)")
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(part, str) for part in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise NotebookError(f"{p}: cell {index} has a source that is neither text nor a list of lines")
        count = cell.get("execution_count")
        if not isinstance(count, int) or isinstance(count, bool):
            count = None
        out.append(
            NotebookCell(index=index, cell_type=cell["cell_type"], source=source, execution_count=count)
        )
    return out


def code_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of a notebook's code: its code cells' sources in order. Saving outputs, execution counts or
    metadata does not change it (a notebook file's own hash changes every time it is saved after a run).
    Raises `NotebookError` for a notebook that cannot be read."""
    import hashlib

    digest = hashlib.sha256()
    for cell in read_notebook_cells(path):
        if cell.cell_type == "code":
            digest.update(cell.source.encode("utf-8"))
            digest.update(b"\x00")
    return digest.hexdigest()


def notebook_code_cells(ipynb_path: str | os.PathLike[str]) -> list[CodeCell]:
    """The code cells of a notebook, in order, as Python to run as a script.

    IPython syntax (``%pip install x``, ``!ls``, ``%%time``, ``x?``) is transformed the way the kernel does when
    IPython is importable (``get_ipython().run_line_magic(...)``: running it then needs an IPython shell);
    otherwise such lines become ``pass`` with the same indentation, so line numbers stay those of the cell.
    Raises `NotebookError` (one line) for a notebook that cannot be read.
    """
    transform = _ipython_transformer()
    out = []
    for cell in read_notebook_cells(ipynb_path):
        if cell.cell_type != "code":
            continue
        source = _transform_cell(cell.source, transform)
        out.append(CodeCell(index=cell.index, source=source, raw=cell.source))
    return out


def transform_source(source: str) -> str:
    """Cell code transformed as `notebook_code_cells` transforms a cell (IPython's transform, or ``pass`` lines)."""
    return _transform_cell(source, _ipython_transformer())


def _ipython_transformer() -> Any:
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except Exception:  # noqa: BLE001 - IPython missing or broken: fall back to the plain rewrite
        return None
    return TransformerManager()


def _transform_cell(source: str, manager: Any) -> str:
    if manager is not None:
        try:
            transformed = manager.transform_cell(source)
        except Exception:  # noqa: BLE001 - IPython's transformer chokes on some broken cells
            transformed = None
        if isinstance(transformed, str):
            # IPython drops leading blank lines; put them back so line numbers are the cell's.
            missing = _leading_blank_lines(source) - _leading_blank_lines(transformed)
            return "\n" * max(missing, 0) + transformed
    return _replace_magics(source)


def _leading_blank_lines(text: str) -> int:
    count = 0
    for line in text.splitlines():
        if line.strip():
            break
        count += 1
    return count


def readable_cell(source: str) -> str:
    """A cell's code for reading (ast), not running: IPython-only lines become ``pass`` and a Python cell magic's
    body (``%%time``) stays code, on the cell's own line numbers. IPython's transform would turn that body into a
    string argument of ``run_cell_magic``, where no call can be found."""
    return _replace_magics(source)


def _replace_magics(source: str) -> str:
    """IPython-only lines -> ``pass`` (same indentation, same number of lines), without IPython."""
    lines = source.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        name = lines[first].lstrip()[2:].split(maxsplit=1)
        keep_body = bool(name) and name[0] in _PYTHON_BODY_CELL_MAGICS
        out = lines[:first] + ["pass"]
        out += lines[first + 1 :] if keep_body else ["pass"] * (len(lines) - first - 1)
        return "\n".join(out) + ("\n" if source.endswith("\n") else "")
    out = []
    continued: str | None = None  # indentation of a magic line continued with a backslash
    for line in lines:
        if continued is not None:
            out.append(continued + "pass")
            continued = continued if line.rstrip().endswith("\\") else None
            continue
        match = _MAGIC_LINE_RE.match(line) or _ASSIGN_MAGIC_RE.match(line)
        if match is None:
            out.append(line)
            continue
        indent = match.group("indent")
        timed = _TIMED_LINE_RE.match(line)
        if timed is not None and not line.rstrip().endswith("\\"):
            # ``%time history = model.fit(...)`` runs its statement: kept, so the fit call and what it is given
            # are read as the code (a `pass` lost the data's provenance).
            out.append(indent + timed.group("statement"))
            continue
        out.append(indent + "pass")
        if line.rstrip().endswith("\\"):
            continued = indent
    return "\n".join(out) + ("\n" if source.endswith("\n") else "")


def normalized_source(source: str) -> str:
    """Cell source for comparison: newlines unified, trailing whitespace of each line and of the cell dropped."""
    lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).rstrip()


def same_cell_text(source: str) -> str:
    """`normalized_source` without leading blank lines: a saved cell and the kernel's record of it, compared for
    which cell ran (not for its line numbers, which the blank lines keep)."""
    return normalized_source(source).lstrip("\n")
