"""The line of a bundle's entry script that started training: the stand-in line for ops made by Keras itself.

A Keras bundle is replayed by calling ``model.train_step`` directly, so an op made inside Keras (its losses,
its layers) has no frame in the user's code in the replay's dump. During training the user's ``model.fit(...)``
line was on the stack; this finds it again by reading the entry script (no import, no TensorFlow): the first
``.fit(`` call for a Keras bundle, the first call of the guarded step function for a custom loop.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from pyadapter.capture.fit_call import MANIFEST_KEY as FIT_CALL_KEY
from pyadapter.capture.fit_call import FitCall
from pyadapter.cause.sources import called_name, read_source
from pyadapter.findings import Frame

KERAS_TRAINING_CALLS = ("fit", "train_on_batch")


def _enclosing_functions(tree: ast.AST) -> dict[int, str]:
    """id(call node) -> name of the innermost function that contains it ("<module>" at top level)."""
    owners: dict[int, str] = {}

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = owner
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = child.name
            if isinstance(child, ast.Call):
                owners[id(child)] = owner
            visit(child, name)

    visit(tree, "<module>")
    return owners


def training_call_frame(
    script: str | Path, kind: str | None, step_function: str | None = None
) -> Frame | None:
    """The first call in ``script`` that runs training: ``X.fit(...)`` (or ``train_on_batch``) for a Keras
    bundle, ``step_function(...)`` for a custom loop. None if the script cannot be read or has no such call."""
    path = Path(script)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    wanted = KERAS_TRAINING_CALLS if kind != "custom_loop" else ()
    if step_function:
        wanted = (*wanted, step_function.split(".")[-1])
    owners = _enclosing_functions(tree)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and called_name(n) in wanted]
    if not calls:
        return None
    first = min(calls, key=lambda n: (n.lineno, n.col_offset))
    return Frame(file=str(path), line=first.lineno, function=owners.get(id(first), "<module>"))


def fit_call_frame(script: str | Path, call: FitCall) -> Frame | None:
    """The line of ``script`` (a .py, or a notebook's cell `call.cell`) whose text is the recorded fit call's
    (``%time history = model.fit(...)`` holds it too); None when no line is. A program of two fits (a notebook
    fitting again after reloading its data, a resumed run) failed in the one its bundle recorded, not the first."""
    path = Path(script)
    if path.suffix == ".ipynb":
        if call.cell is None:
            return None
        from pyadapter.capture.notebook_file import NotebookError, read_notebook_cells

        try:
            cells = read_notebook_cells(path)
        except NotebookError:
            return None
        sources = [cell.source for cell in cells if cell.index == call.cell]
        if not sources:
            return None
        lines = sources[0].splitlines()
    else:
        text = read_source(str(path))
        if text is None:
            return None
        lines = text.splitlines()
    for number, text in enumerate(lines, 1):
        if text.strip() == call.code or (call.code in text and text.lstrip().startswith("%")):
            return Frame(file=str(path), line=number, function="<module>", cell=call.cell)
    return None


def bundle_training_call(bundle: Any) -> Frame | None:
    """The training call of a loaded CaptureBundle: the fit its manifest recorded (`fit_call_frame`), else
    ``training_call_frame`` (its entry script, kind and step function)."""
    script = bundle.entry_script
    if script is None:
        return None
    recorded = FitCall.from_json((bundle.manifest.get("model") or {}).get(FIT_CALL_KEY))
    if recorded is not None and (frame := fit_call_frame(script, recorded)) is not None:
        if Path(script).suffix == ".ipynb":
            return frame
        # In a script, the function around the line as training_call_frame names it.
        first = training_call_frame(script, bundle.kind)
        if first is not None and first.line == frame.line:
            return first
        return frame
    step_function = (bundle.manifest.get("step_function") or {}).get("qualname")
    return training_call_frame(script, bundle.kind, step_function)
