"""Notebook programs in the zoo: a ``zoo_*.ipynb`` is run the way Jupyter runs it, headless.

``python -m pyadapter.evaluate.notebook NOTEBOOK.ipynb [--check-numerics]`` executes every cell in order in a
real IPython kernel (ipykernel, driven by nbclient), started as Jupyter starts one: from a kernelspec (here a
temporary one, found through ``JUPYTER_PATH``, that runs this interpreter), in the notebook's folder, with
``JPY_SESSION_NAME`` naming the notebook (jupyter_server sets it; NanGuard reads it to know its ``.ipynb``). The
kernel inherits this process's environment (``NANLENS_CAPTURE_DIR`` among it). Each cell's printed output is
passed on as the cell finishes: its stdout to stdout, its stderr (NanGuard's messages) and errors to stderr.

Exit status: 0 when every cell ran, 1 when every cell ran and one printed the zoo's ``zoo: training went
non-finite``, 3 when a cell raised (its traceback, without colors, on stderr), 2 for a bad command line or
notebook. ``--check-numerics`` first runs a cell of its own that calls ``tf.debugging.enable_check_numerics()``,
so the notebook stops at the first op that makes NaN/Inf (TensorFlow's second opinion, see `checknumerics`).

A notebook's ``# ORIGIN`` marker is a comment in a code cell: it is located by the cell's 0-based index among
all cells of the notebook (markdown cells count, as in the findings' ``cell``) and the line within that cell.
Needs nbclient, nbformat and ipykernel (the ``test`` extra) only to run a notebook, not to read its markers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

NOTEBOOK_SUFFIX = ".ipynb"
KERNEL_NAME = "nanlens-eval-python"
NON_FINITE_LINE = "zoo: training went non-finite"
CHECK_NUMERICS_CELL = "import tensorflow as tf\ntf.debugging.enable_check_numerics()"
STARTUP_TIMEOUT = 120  # seconds for the kernel to start and answer

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def is_notebook(path: str | os.PathLike[str]) -> bool:
    return Path(path).suffix.lower() == NOTEBOOK_SUFFIX


def code_cell_sources(path: Path) -> list[tuple[int, str]]:
    """``(cell index among all cells, source as Python)`` for each code cell; IPython magics become Python (or
    ``pass``) with the cell's line numbers kept. Raises `pyadapter.capture.notebook.NotebookError`."""
    from pyadapter.capture.notebook import notebook_code_cells

    return [(cell.index, cell.source) for cell in notebook_code_cells(path)]


def first_markdown_line(path: Path, prefix: str = "Zoo:") -> str:
    """The first line of a markdown cell that starts with `prefix` (else the first markdown heading), or ""."""
    from pyadapter.capture.notebook import NotebookError, read_notebook_cells

    try:
        cells = read_notebook_cells(path)
    except NotebookError:
        return ""
    heading = ""
    for cell in cells:
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            text = line.strip()
            if text.startswith(prefix):
                return text
            if not heading and text.startswith("#"):
                heading = text.lstrip("#").strip()
    return heading


def run_argv(path: Path, *, check_numerics: bool = False) -> list[str]:
    """The command that runs the notebook headless (in a child process the evaluation bounds by a timeout)."""
    argv = [sys.executable, "-m", "pyadapter.evaluate.notebook", str(Path(path).resolve())]
    return argv + (["--check-numerics"] if check_numerics else [])


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def _write_kernelspec(jupyter_dir: Path) -> None:
    """A kernelspec that starts this interpreter's ipykernel, visible only through ``JUPYTER_PATH``."""
    spec_dir = jupyter_dir / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "NaN Lens eval (Python)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")


def _output_text(output: Any) -> tuple[str, str]:
    """``(stream, text)`` for one cell output: "stdout"/"stderr" for printed text and errors, "" otherwise."""
    kind = output.get("output_type")
    if kind == "stream":
        return ("stderr" if output.get("name") == "stderr" else "stdout"), str(output.get("text", ""))
    if kind == "error":
        traceback = "\n".join(output.get("traceback") or [])
        return "stderr", strip_ansi(traceback or f"{output.get('ename')}: {output.get('evalue')}") + "\n"
    return "", ""


class _Echo:
    """Passes each executed cell's printed output on, and remembers whether the zoo's non-finite line came."""

    def __init__(self) -> None:
        self.non_finite = False

    def __call__(self, cell: Any, cell_index: int, execute_reply: Any = None) -> None:
        for output in cell.get("outputs", []):
            stream, text = _output_text(output)
            if not text:
                continue
            if stream == "stdout" and any(line.startswith(NON_FINITE_LINE) for line in text.splitlines()):
                self.non_finite = True
            print(
                text,
                end="" if text.endswith("\n") else "\n",
                file=sys.stderr if stream == "stderr" else sys.stdout,
                flush=True,
            )


def execute(path: Path, *, check_numerics: bool = False, cell_timeout: int | None = None) -> int:
    """Run every cell of the notebook in a fresh kernel, as Jupyter does; the exit status (module docstring)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    path = path.resolve()
    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception as exc:  # noqa: BLE001 - any unreadable notebook is one line for the user
        print(f"nanlens eval: cannot read {path}: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    if check_numerics:
        nb.cells.insert(0, nbformat.v4.new_code_cell(CHECK_NUMERICS_CELL))
    echo = _Echo()
    with tempfile.TemporaryDirectory(prefix="nanlens-eval-jupyter-") as scratch:
        base = Path(scratch)
        _write_kernelspec(base / "jupyter")
        os.environ["JUPYTER_PATH"] = str(base / "jupyter")
        os.environ["JUPYTER_RUNTIME_DIR"] = str(base / "runtime")
        os.environ["IPYTHONDIR"] = str(base / "ipython")
        os.environ["JPY_SESSION_NAME"] = str(path)  # as jupyter_server tells the kernel its notebook
        os.environ.pop("IPYKERNEL_CELL_NAME", None)
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
        client = NotebookClient(
            nb,
            timeout=cell_timeout,
            startup_timeout=STARTUP_TIMEOUT,
            kernel_name=KERNEL_NAME,
            resources={"metadata": {"path": str(path.parent)}},  # the kernel starts in the notebook's folder
            on_cell_executed=echo,
        )
        try:
            client.execute()
        except CellExecutionError as exc:
            # The failing cell's outputs, its traceback among them, were passed on already.
            evalue = strip_ansi(str(getattr(exc, "evalue", "") or "")).strip().splitlines()
            print(
                f"nanlens eval: a cell of {path.name} raised {getattr(exc, 'ename', 'an error')}"
                + (f": {evalue[0]}" if evalue else ""),
                file=sys.stderr,
                flush=True,
            )
            return 3
    return 1 if echo.non_finite else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pyadapter.evaluate.notebook",
        description="Run a Jupyter notebook headless, as Jupyter does.",
    )
    parser.add_argument("notebook", help="the .ipynb to run")
    parser.add_argument(
        "--check-numerics",
        action="store_true",
        help="run tf.debugging.enable_check_numerics() before the notebook's first cell",
    )
    parser.add_argument(
        "--cell-timeout",
        type=int,
        default=None,
        metavar="SECONDS",
        help="limit for each cell (default: none; the caller bounds the whole run)",
    )
    args = parser.parse_args(argv)
    path = Path(args.notebook)
    if not path.is_file() or not is_notebook(path):
        print(f"nanlens eval: {path} is not a .ipynb file", file=sys.stderr)
        return 2
    return execute(path, check_numerics=args.check_numerics, cell_timeout=args.cell_timeout)


if __name__ == "__main__":
    sys.exit(main())
