"""Notebook findings in the editor: (notebook path, cell index) <-> the cell documents the client synced.

A finding in notebook code has ``file`` = the ``.ipynb``, ``cell`` = the 0-based index among ALL its cells
(markdown cells count) and ``line`` 1-based inside the cell. The server asks for every cell of open
``jupyter-notebook`` documents (LSP notebook synchronization, see ``NOTEBOOK_SYNC``), so the N-th cell the
client sent is cell N, and its document URI (``vscode-notebook-cell:...``) is where that cell's diagnostics,
hovers and CodeLenses go. A notebook that is not open gets none: publishing on the ``.ipynb`` itself would put
cell lines on lines of its JSON. Reading the ``.ipynb`` from disk (the cell's text when it is not open) needs
no Jupyter package: it is JSON with ``cells[i].source`` a string or a list of strings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

from lsprotocol import types
from pygls.uris import to_fs_path

from pyadapter.server.state import same_file

# Every cell of a notebook opened from disk: no `cells` filter, so markdown cells are synced too and indices
# match the findings' (filtering by language would drop them and shift every index after a markdown cell).
NOTEBOOK_SYNC = types.NotebookDocumentSyncOptions(
    notebook_selector=[
        types.NotebookDocumentFilterWithNotebook(
            notebook=types.NotebookDocumentFilterNotebookType(notebook_type="jupyter-notebook", scheme="file")
        ),
    ]
)


def is_notebook_path(path: str) -> bool:
    return path.lower().endswith(".ipynb")


def cell_sources(text: str | None) -> list[str] | None:
    """Each cell's source text of an ``.ipynb`` (all cells, in order); None when it is not notebook JSON."""
    if text is None:
        return None
    try:
        data: Any = json.loads(text)
    except ValueError:
        return None
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        return None
    out: list[str] = []
    for cell in cells:
        source = cell.get("source", "") if isinstance(cell, dict) else ""
        if isinstance(source, list):
            source = "".join(part for part in source if isinstance(part, str))
        out.append(source if isinstance(source, str) else "")
    return out


def find_notebook(notebooks: Iterable[types.NotebookDocument], path: str) -> types.NotebookDocument | None:
    """The open notebook whose file is ``path``."""
    for notebook in notebooks:
        nb_path = to_fs_path(notebook.uri)
        if nb_path is not None and same_file(nb_path, path):
            return notebook
    return None


def cell_uri(notebooks: Iterable[types.NotebookDocument], path: str, cell: int) -> str | None:
    """The document URI of cell ``cell`` of the open notebook ``path``; None when closed or out of range."""
    notebook = find_notebook(notebooks, path)
    if notebook is None or not 0 <= cell < len(notebook.cells):
        return None
    return notebook.cells[cell].document


def cell_place(notebook: types.NotebookDocument | None, uri: str) -> tuple[str, int] | None:
    """(notebook path, cell index) of the cell document ``uri`` in ``notebook``."""
    if notebook is None:
        return None
    path = to_fs_path(notebook.uri)
    if path is None:
        return None
    wanted = unquote(uri)
    for index, cell in enumerate(notebook.cells):
        if unquote(cell.document) == wanted:
            return path, index
    return None


def import_preamble(sources: Iterable[str]) -> str:
    """The top-level import lines of some cells' sources (a notebook's cells before the one being fixed)."""
    lines = [
        line.rstrip()
        for source in sources
        for line in source.splitlines()
        if line.startswith("import ") or (line.startswith("from ") and " import " in line)
    ]
    # A statement continued on the next line would not parse alone: leave it out.
    return "".join(f"{line}\n" for line in lines if not line.endswith(("(", "\\", ",")))
