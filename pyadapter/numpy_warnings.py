"""NumPy's own word on where a NaN/Inf was made before training: ``train.py:20: RuntimeWarning: divide by zero
encountered in log``.

A batch that holds NaN/Inf was made before any TensorFlow op touched it, most often by NumPy arithmetic in the
program (``np.log(prices[1:] / prices[:-1])`` with a price of 0, ``(frame - mean) / std`` of a constant frame).
The dump cannot see it and the bundle's batch says only which element; NumPy said which line when it warned. The
warnings are recorded as Python shows them (``warnings.showwarning`` wrapped, once, at ``import pyadapter``, which
comes with the program's imports; each is still shown as before), and a bundle's manifest carries them as data
(``MANIFEST_KEY``): the cause names the line. Pure standard library; nothing is recorded that Python did not show
(a filtered or ``np.errstate``-silenced warning is not).
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Any

MANIFEST_KEY = "numpy_warnings"
# The first ones: the later are usually what the first made (a mean of a column holding -inf).
MAX_RECORDED = 20
# NumPy's floating-point error messages ("divide by zero encountered in log", "invalid value encountered in divide",
# "overflow encountered in exp") and its reductions over nothing ("Mean of empty slice", "Degrees of freedom <= 0 for
# slice", a NaN each).
_MESSAGES = (" encountered in ", "of empty slice", "Degrees of freedom <= 0")


def _is_numpy_message(text: str) -> bool:
    return any(part in text for part in _MESSAGES)


@dataclass(frozen=True)
class NumpyWarning:
    """One line NumPy warned at: where (the program's file and line), and what ("divide by zero encountered in
    log")."""

    file: str
    line: int
    message: str
    # For a notebook's cell: `file` is the .ipynb, `line` counts in the cell; the kernel's file of
    # the cell (/tmp/ipykernel_.../....py) is what was recorded.
    cell: int | None = None

    @property
    def makes(self) -> str:
        """What the warned operation makes: "inf" (a division by zero, an overflow) or "nan" (an invalid value:
        0/0, log of a negative, inf - inf; a mean of nothing)."""
        return "inf" if self.message.startswith(("divide by zero", "overflow")) else "nan"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "line": self.line, "message": self.message}
        if self.cell is not None:
            out["cell"] = self.cell
        return out


_recorded: list[NumpyWarning] = []
_lock = threading.Lock()


def _record(message: Any, category: Any, filename: Any, lineno: Any) -> None:
    if not (isinstance(category, type) and issubclass(category, RuntimeWarning)):
        return
    text = str(message)
    if not _is_numpy_message(text) or not isinstance(filename, str) or not isinstance(lineno, int):
        return
    from pyadapter.dump.frames import (
        innermost_user_call,
        is_pseudo_or_nanlens_file,
        is_timed_body,
        is_user_file,
    )

    if is_timed_body(filename):
        # A ``%%time`` cell's code (IPython compiles it as "<timed exec>"): its line in the cell, not the magic's
        # line 1 that every warning of the cell was put on.
        found = innermost_user_call(sys._getframe(1))
        if found is None:
            return
        filename, lineno = found[0], found[1]
    elif not is_user_file(filename):
        # Warned inside NumPy's own Python (``np.mean`` of an empty slice warns from numpy/_core/_methods.py) or a
        # library: the line is the program's own frame that called it, up the stack this is shown from.
        frame = sys._getframe(1)
        while frame is not None and (
            not is_user_file(frame.f_code.co_filename) or is_pseudo_or_nanlens_file(frame.f_code.co_filename)
        ):
            frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return
        filename, lineno = frame.f_code.co_filename, frame.f_lineno
    # Absolute now: the program may change its folder before the step fails.
    entry = NumpyWarning(os.path.abspath(filename), lineno, text.splitlines()[0][:200])
    with _lock:
        if len(_recorded) < MAX_RECORDED and entry not in _recorded:
            _recorded.append(entry)


def install() -> None:
    """Wrap ``warnings.showwarning`` to record NumPy's floating-point warnings as they are shown (not twice: a
    wrapper already in place is kept). Never raises, and the warning is shown exactly as before."""
    shown = warnings.showwarning
    if getattr(shown, "_nanlens_records", False):
        return

    def showwarning(
        message: Any, category: Any, filename: Any, lineno: Any, *args: Any, **kwargs: Any
    ) -> Any:
        try:
            _record(message, category, filename, lineno)
        except Exception:  # noqa: BLE001 - recording is a hint; it must never break a warning
            pass
        return shown(message, category, filename, lineno, *args, **kwargs)

    showwarning._nanlens_records = True  # type: ignore[attr-defined]
    warnings.showwarning = showwarning


def recorded() -> list[NumpyWarning]:
    """The warnings recorded so far in this process, in the order they were shown."""
    with _lock:
        return list(_recorded)


def manifest_entry() -> dict[str, Any]:
    """``{"numpy_warnings": [...]}`` for a bundle's manifest, or {} when NumPy warned at no line of the program."""
    found = recorded()
    return {MANIFEST_KEY: [w.to_json() for w in found]} if found else {}


def read(data: Any) -> list[NumpyWarning]:
    """The warnings a bundle's manifest holds; entries that are not well formed are dropped (a bundle is data)."""
    if not isinstance(data, list):
        return []
    out: list[NumpyWarning] = []
    for item in data[:MAX_RECORDED]:
        if not isinstance(item, dict):
            continue
        file, line, message = item.get("file"), item.get("line"), item.get("message")
        if (
            isinstance(file, str)
            and isinstance(line, int)
            and not isinstance(line, bool)
            and line > 0
            and isinstance(message, str)
            and _is_numpy_message(message)
        ):
            out.append(NumpyWarning(file, line, message[:200]))
    return out
