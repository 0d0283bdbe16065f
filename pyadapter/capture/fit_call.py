"""Which ``fit`` of a program a bundle came from: the text of the user's line that called it, and how many fits
that line had begun before (a resumed run calls fit twice from two lines; a cross-validation loop calls one line
once per fold). A replay by re-entry runs the program again and takes over the fit whose call matches
(`pyadapter.replay.reentry`); the text, not the line number, so that an edit elsewhere in the file (the fix being
verified) does not lose the fit.

Manifest (``manifest["model"]["fit_call"]``): ``{"code": "model.fit(x, y, epochs=6)", "ordinal": 1}``; in a
notebook also ``"cell": 5, "per_cell_run": true``: the ordinal counts the fits the line began in that run of its cell
(a sweep's ``for lr in [...]: model.fit(...)`` begins three in one run), since a kernel runs cells again and a
re-entry runs each once.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pyadapter.dump.frames import innermost_user_call

MANIFEST_KEY = "fit_call"
MAX_CODE = 400  # characters of the line kept


@dataclass(frozen=True)
class FitCall:
    code: str  # the calling line's text, stripped
    ordinal: int  # fits begun from a line of this text before this one, in this process
    cell: int | None = None  # in a notebook: the cell (0-based among all cells) the line is in
    # In a notebook: `ordinal` counts within one run of the cell (older bundles counted over the kernel's life, and
    # a re-entry could not match that: their notebook fits are told by the cell alone).
    per_cell_run: bool = False
    # In a notebook: the cell whose run began the fit, when known (a sweep's ``train(lr)`` defined in cell 5 and
    # called from cells 7, 8 and 9: one fit line, three fits, each the first of its run).
    run_cell: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "ordinal": self.ordinal}
        if self.cell is not None:
            out["cell"] = self.cell
        if self.per_cell_run:
            out["per_cell_run"] = True
        if self.run_cell is not None:
            out["run_cell"] = self.run_cell
        return out

    @classmethod
    def from_json(cls, data: Any) -> FitCall | None:
        """None for anything but a well-formed entry (a bundle is data)."""
        if not isinstance(data, dict):
            return None
        code, ordinal, cell = data.get("code"), data.get("ordinal"), data.get("cell")
        if not isinstance(code, str) or not code or len(code) > MAX_CODE:
            return None
        if not isinstance(ordinal, int) or not _count(ordinal) or not (cell is None or _count(cell)):
            return None
        run_cell = data.get("run_cell")
        return cls(
            code, ordinal, cell, data.get("per_cell_run") is True, run_cell if _count(run_cell) else None
        )

    def same_fit(self, other: FitCall) -> bool:
        """Whether `other`, a fit begun in a re-entry, is this one: the line's text and how many fits it began before
        (in a notebook, in that run of its cell, and the cell). An older notebook bundle: the cell alone."""
        if self.code != other.code:
            return False
        if self.run_cell is not None and other.run_cell is not None and self.run_cell != other.run_cell:
            return False
        if self.cell is not None:
            return other.cell == self.cell and (not self.per_cell_run or other.ordinal == self.ordinal)
        return other.ordinal == self.ordinal


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def running_cell(cell_of: Callable[[str, int], tuple[Any, ...] | None]) -> int | None:
    """The cell whose run is executing (the outermost frame on the stack that `cell_of` places in a cell: the cell
    that called a function another cell defined), or None. `cell_of(file, line)` gives a place whose second item is
    the cell's index (a kernel's ``notebook.cell_location``, a re-entry's ``notebook_cell_of``), or None."""
    found = None
    frame: Any = sys._getframe(1)
    while frame is not None:
        place = cell_of(frame.f_code.co_filename, frame.f_lineno)
        if place is not None:
            found = place[1]
        frame = frame.f_back
    return found


def calling_line() -> tuple[str, int, str] | None:
    """(file, line, text) of the innermost user line on the stack (the line that called fit), or None."""
    found = innermost_user_call(sys._getframe(1), MAX_CODE)
    return (found[0], found[1], found[2]) if found is not None and found[2] else None


def keras_fit_on_stack() -> bool:
    """Whether a Keras ``fit`` is running (the guard's ``on_train_begin`` called by it), not the program itself
    calling ``on_train_begin`` (``CallbackList([guard], model=model).on_train_begin()`` before a loop of
    ``train_on_batch``): that line is no training call."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        if frame.f_code.co_name == "fit" and ("/keras/src/" in path or "/tf_keras/" in path):
            return True
        frame = frame.f_back
    return False


def fit_input_kind() -> str | None:
    """``"dataset"`` (``"shuffled dataset"`` when the pipeline shuffles) when the Keras ``fit`` on the stack was
    given a ``tf.data`` dataset, also one a helper of the user's made (``fit(make_spec_ds(train_ds))``, which reading
    the code cannot tell from arrays); ``"PyDataset"`` for a ``keras.utils.PyDataset`` (or ``Sequence``) and
    ``"generator"`` for a Python generator or iterator, which make their own batches in their own order; else None.
    Read from fit's own frame, while fit runs (the guard's ``on_train_begin``)."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        if frame.f_code.co_name == "fit" and "/keras/src/" in path and "x" in frame.f_code.co_varnames:
            try:
                import tensorflow as tf

                given = frame.f_locals.get("x")
                kinds = (tf.data.Dataset, tf.distribute.DistributedDataset)
                if _is_py_dataset(given):
                    return "PyDataset"
                if isinstance(given, Iterator):
                    return "generator"
                if not isinstance(given, kinds):
                    return None
                return "shuffled dataset" if _shuffles(given) else "dataset"
            except Exception:  # noqa: BLE001 - an addition to the manifest: never lose a fit for it
                return None
        frame = frame.f_back
    return None


def _is_py_dataset(given: Any) -> bool:
    """Whether fit's ``x`` is a PyDataset (Keras 3's ``keras.utils.PyDataset``, ``Sequence`` its old name), by its
    classes' names: tf_keras's ``Sequence`` is another class."""
    return any(
        cls.__name__ in ("PyDataset", "Sequence") and cls.__module__.startswith(("keras", "tf_keras"))
        for cls in type(given).__mro__
    )


def _shuffles(dataset: Any, depth: int = 0) -> bool:
    """Whether a pipeline shuffles: a ``.shuffle`` among the datasets it is made of (their Python objects, not the
    graph: serializing it would copy the arrays ``from_tensor_slices`` holds)."""
    if "Shuffle" in type(dataset).__name__:
        return True
    inputs = getattr(dataset, "_inputs", None)
    if depth > 64 or not callable(inputs):
        return False
    return any(_shuffles(d, depth + 1) for d in inputs())


class FitCounter:
    """Counts the fits begun per calling line's text, in one process (the training run, or one re-entry); in a
    notebook per run of the line's cell (`run`: the kernel's execution count; a re-entry runs each cell once)."""

    def __init__(self) -> None:
        self._seen: Counter[tuple[str, int | None]] = Counter()

    def begin(
        self, code: str | None, cell: int | None = None, run: int | None = None, run_cell: int | None = None
    ) -> FitCall | None:
        if code is None:
            return None
        key = (code, run if cell is not None else None)
        call = FitCall(code, self._seen[key], cell, per_cell_run=cell is not None, run_cell=run_cell)
        self._seen[key] += 1
        return call


TRAINING = FitCounter()  # the fits this training process has begun under a guard
