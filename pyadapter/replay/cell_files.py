"""Where a re-entry writes a notebook's code cells as files (frames and breakpoints need files), and which
notebook cell such a file is: ``<notebook folder>/.nanlens/cells/<stem>-<hash of the path>/cell<N>.py``.
No TensorFlow, nothing of the replay: the names alone (a replay's note on random draws reads them too)."""

from __future__ import annotations

import hashlib
from pathlib import Path

NANLENS_FOLDER = ".nanlens"  # NaN Lens's own folder beside the program (cell files, dumps, captures)


def cell_files_dir(notebook: Path) -> Path:
    """Where a notebook's code cells are written as files for a re-entry (frames and breakpoints need files):
    ``<notebook folder>/.nanlens/cells/<stem>-<hash of the path>/``."""
    digest = hashlib.sha256(str(notebook.absolute()).encode()).hexdigest()[:8]
    return notebook.absolute().parent / NANLENS_FOLDER / "cells" / f"{notebook.stem}-{digest}"


def cell_file(notebook: Path, cell: int) -> Path:
    """The file a re-entry runs cell `cell` (0-based among all the notebook's cells) from."""
    return cell_files_dir(notebook) / f"cell{cell}.py"


def notebook_cell_of(file: str) -> tuple[str, int] | None:
    """(the .ipynb, cell index) when `file` is a cell file a re-entry ran (`cell_file`), else None."""
    path = Path(file)
    name = path.name
    if not (name.startswith("cell") and name.endswith(".py") and name[4:-3].isdigit()):
        return None
    folder = path.parent
    if folder.parent.name != "cells" or folder.parent.parent.name != NANLENS_FOLDER or "-" not in folder.name:
        return None
    stem = folder.name.rsplit("-", 1)[0]
    notebook = folder.parent.parent.parent / f"{stem}.ipynb"
    if cell_files_dir(notebook) != folder.absolute():
        return None
    return str(notebook), int(name[4:-3])


def shown_place(file: str, line: int) -> str:
    """'train.py:12', or for a re-entered notebook's cell file 'dcgan.ipynb cell 16, line 8': the user knows the
    notebook's cell, not the file a re-entry ran it from."""
    from pyadapter.findings_text import place_text

    cell = notebook_cell_of(file)
    if cell is not None:
        return place_text(Path(cell[0]).name, line, cell[1])
    return f"{Path(file).name}:{line}"
