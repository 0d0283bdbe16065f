"""The text the user sees: editor buffers (notebook cells included) when open, else the files on disk.

Findings carry (file, line, notebook cell); the editor shows documents by URI. This object maps one to the other
and reads a line's current text for the diagnostics' ranges and the staleness check. It holds no findings and
talks to no client: the server object (core.py) owns it, on the event loop thread. Disk reads are cached until
``forget_disk`` (each publish and each file change), so one publish reads a file once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from urllib.parse import unquote

from pygls.uris import from_fs_path, to_fs_path
from pygls.workspace import TextDocument, Workspace

from pyadapter.server.notebooks import cell_place, cell_sources, cell_uri, find_notebook
from pyadapter.server.render import Place
from pyadapter.server.staleness import read_text
from pyadapter.server.state import same_file


class Documents:
    """Lines and URIs of the workspace's documents; ``workspace`` is the server's (read on each call: pygls makes
    it at initialize)."""

    def __init__(self, workspace: Callable[[], Workspace]) -> None:
        self._workspace = workspace
        self._disk_lines: dict[str, Sequence[str] | None] = {}
        self._disk_cells: dict[str, list[str] | None] = {}  # .ipynb -> its cells' source, read from disk

    def forget_disk(self) -> None:
        self._disk_lines.clear()
        self._disk_cells.clear()

    def open_document(self, path: str) -> TextDocument | None:
        """The editor's buffer for a file, if open (matched by path: clients spell URIs differently)."""
        docs = self._workspace().text_documents
        doc = docs.get(from_fs_path(path) or "")
        if doc is not None:
            return doc
        for uri, doc in docs.items():
            if (doc_path := to_fs_path(uri)) is not None and same_file(doc_path, path):
                return doc
        return None

    def current_text(self, path: str) -> str | None:
        """The file as the user sees it: the editor buffer when open, else the disk. An open notebook: its
        cells' current sources, as notebook JSON (staleness hashes a notebook by its cells' sources only)."""
        notebook = find_notebook(self._workspace().notebook_documents.values(), path)
        if notebook is not None:
            docs = [self.synced_document(cell.document) for cell in notebook.cells]
            return json.dumps({"cells": [{"source": doc.source if doc is not None else ""} for doc in docs]})
        doc = self.open_document(path)
        return doc.source if doc is not None else read_text(path)

    def line_text(self, path: str, line: int, cell: int | None = None) -> str | None:
        """A 1-based line of a file (of a notebook's cell) as the user sees it; None when there is none."""
        if cell is not None:
            lines = self.cell_lines(path, cell)
        elif (doc := self.open_document(path)) is not None:
            lines = doc.lines
        else:
            if path not in self._disk_lines:
                text = read_text(path)
                self._disk_lines[path] = text.splitlines() if text is not None else None
            lines = self._disk_lines[path]
        return lines[line - 1] if lines is not None and 0 < line <= len(lines) else None

    # --- notebooks: a finding's `cell` is shown on that cell's document (pyadapter/server/notebooks.py) ---------

    def cell_lines(self, path: str, cell: int) -> Sequence[str] | None:
        """A notebook cell's lines: the editor's cell when the notebook is open, else the .ipynb on disk."""
        uri = cell_uri(self._workspace().notebook_documents.values(), path, cell)
        doc = self.synced_document(uri) if uri is not None else None
        if doc is not None:
            return doc.lines
        if path not in self._disk_cells:
            self._disk_cells[path] = cell_sources(read_text(path))
        cells = self._disk_cells[path]
        return cells[cell].splitlines() if cells is not None and 0 <= cell < len(cells) else None

    def synced_document(self, uri: str) -> TextDocument | None:
        """A document the client opened (a notebook cell's included), never one read from disk."""
        return self._workspace().text_documents.get(unquote(uri))

    def place_of_uri(self, uri: str) -> Place | None:
        """The (file, cell) a document shows: a file URI is its path; a synced notebook cell is (.ipynb, index)."""
        path = to_fs_path(uri)
        if path is not None:
            return path, None
        return cell_place(self._workspace().get_notebook_document(cell_uri=uri), uri)

    def uri_of(self, path: str, cell: int | None) -> str | None:
        """The document URI that shows a place: the file's, or the cell's while its notebook is open."""
        if cell is None:
            return from_fs_path(path)
        return cell_uri(self._workspace().notebook_documents.values(), path, cell)
