"""The guard's step history: what NanGuard / guard_step remember of the last N steps, and its manifest rows.

Inside the compiled step the gate (`pyadapter.capture.gate`) computes, next to its finite checks, a float32 vector
of five numbers per step (`METRICS`; -1.0 where a number was not measured). Python keeps that tensor handle with
the step's loss tensor in a ring (a ``deque`` of `HistoryEntry`) and reads nothing on healthy steps; on a failing
step `rows` turns the ring into the manifest's ``loss_history``. This module does not import TensorFlow (the bundle
reader uses `check_rows`).

Manifest row (``manifest["loss_history"][i]``)::

    {"step": 12, "loss": 0.53, "logged_loss": 0.61, "grad_norm": 4.2, "weight_norm": 31.0,
     "update_ratio": 0.0013, "max_abs_output": 7.9, "learning_rate": 0.001}

- ``loss``: the step's loss as computed in the step; ``logged_loss``: what Keras logged (its running mean);
- ``grad_norm``: L2 norm over every gradient the gate checks (float32; not measured under a LossScaleOptimizer,
  whose gradients are scaled, nor across several replicas, whose local gradients are not the applied ones);
- ``weight_norm``: L2 norm of the checked trainable weights after the step's update (before it, when the update
  was not applied);
- ``update_ratio``: ||w_after - w_before|| / ||w_before||. The numerator is measured from the updates the optimizer
  writes (its ``assign_add`` / ``assign_sub`` / ``assign`` of the checked weights: no copy of the weights is kept;
  decoupled weight decay, which Keras applies outside those, is not counted; an update beyond ~1.8e19, whose
  float32 sum of squares overflows, is null; a weight of more than 16384 values is measured on a sample of
  16384 of them, in blocks of 16 spread over its rows and columns, to a few percent, see
  `gate_checks.sampled_half_squares32`); the denominator is the previous step's ``weight_norm``, so the first row
  of the window and a step whose update was not applied have null;
- ``max_abs_output``: max |value| over the predictions the step's ``model.compute_loss`` received (``y_pred``);
- ``learning_rate``: the first optimizer's constant rate as the step's update read it: a program that sets its rate
  as it trains (a hand schedule, a callback) shows what it set, step by step. Absent where not measured: a schedule
  (its value is a function of the step count), a step that updates its weights itself, bundles older than it.

A number is null when it was not measured or is not finite; a non-finite one also gets ``"<name>_nonfinite":
"nan" | "inf" | "-inf"`` (e.g. ``"loss_nonfinite": "inf"``), so a reader can tell an overflow from a gap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

# The gate's per-step vector, in this order (float32; -1.0: not measured).
METRICS = ("grad_norm", "weight_norm", "update_norm", "max_abs_output", "learning_rate")
NOT_MEASURED = -1.0
# The numbers of a manifest row, each a JSON number or null, each with an optional "<name>_nonfinite" marker.
ROW_NUMBERS = (
    "loss",
    "logged_loss",
    "grad_norm",
    "weight_norm",
    "update_ratio",
    "max_abs_output",
    "learning_rate",
)
NONFINITE_SUFFIX = "_nonfinite"
NONFINITE_MARKERS = ("nan", "inf", "-inf")
DEFAULT_SIZE = 256


@dataclass(slots=True)
class HistoryEntry:
    """One step as the guard saw it: tensor handles, read only when a bundle is written."""

    step: int
    loss: Any = None  # float32 scalar tensor (or None: the step recorded no loss)
    logged_loss: Any = None  # what Keras logged for the step (a tensor or number), or None
    metrics: Any = None  # float32 [len(METRICS)] tensor from the gate, or None (history off / not measured)


def _number(value: Any) -> float | None:
    if value is None:
        return None
    return float(np.asarray(value).item())


def _put(row: dict[str, Any], name: str, value: float | None) -> None:
    """A finite number as is; NaN/Inf as null plus the marker (JSON has no NaN)."""
    if value is None or math.isfinite(value):
        row[name] = value
        return
    row[name] = None
    row[name + NONFINITE_SUFFIX] = "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"


def _entry(item: Any) -> HistoryEntry:
    if isinstance(item, HistoryEntry):
        return item
    return HistoryEntry(*item)  # (step, loss, logged loss[, metrics]) tuples, as older callers kept them


def rows(history: Iterable[Any]) -> list[dict[str, Any]]:
    """The manifest's ``loss_history`` from the guard's ring (reads the tensors: call on failure only)."""
    entries = [_entry(item) for item in list(history)]
    measured: list[dict[str, float | None]] = []
    for entry in entries:
        values: dict[str, float | None] = dict.fromkeys(METRICS)
        if entry.metrics is not None:
            vector = np.asarray(entry.metrics, dtype=np.float64).reshape(-1)
            for name, value in zip(METRICS, vector.tolist(), strict=False):
                # The gate's sentinel is exactly -1.0; norms and |values| are never negative otherwise.
                values[name] = None if value == NOT_MEASURED else value
        measured.append(values)
    result = []
    for index, entry in enumerate(entries):
        values = measured[index]
        row: dict[str, Any] = {"step": int(entry.step)}
        _put(row, "loss", _number(entry.loss))
        _put(row, "logged_loss", _number(entry.logged_loss))
        _put(row, "grad_norm", values["grad_norm"])
        _put(row, "weight_norm", values["weight_norm"])
        _put(row, "update_ratio", _update_ratio(entries, measured, index))
        _put(row, "max_abs_output", values["max_abs_output"])
        if values["learning_rate"] is not None:
            _put(row, "learning_rate", values["learning_rate"])
        result.append(row)
    return result


def _update_ratio(
    entries: list[HistoryEntry], measured: list[dict[str, float | None]], index: int
) -> float | None:
    """||update of step i|| / ||weights after step i-1||: only when step i-1 is the row before and both are known."""
    update = measured[index]["update_norm"]
    if update is None or index == 0 or entries[index - 1].step != entries[index].step - 1:
        return None
    after = measured[index]["weight_norm"]
    if update == math.inf and after is not None and math.isfinite(after):
        # The gate measures updates by their float32 sum of squares, which overflows for |update| > ~1.8e19; with
        # finite weights before and after, the update was finite: out of range, not infinite.
        return None
    before = measured[index - 1]["weight_norm"]
    if before is None or not math.isfinite(before) or before <= 0.0:
        return None
    return update / before


def check_rows(value: Any) -> str | None:
    """Why a manifest's ``loss_history`` is not well-formed data (one line), or None when it is."""
    if not isinstance(value, list):
        return "is not a list"
    for index, row in enumerate(value):
        if not isinstance(row, dict):
            return "holds something other than objects"
        step = row.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            return f"entry {index} has no integer 'step'"
        for name in ROW_NUMBERS:
            number = row.get(name)
            if number is not None and (isinstance(number, bool) or not isinstance(number, (int, float))):
                return f"entry {index} field {name!r} is not a number or null"
            marker = row.get(name + NONFINITE_SUFFIX)
            if marker is not None and marker not in NONFINITE_MARKERS:
                return f"entry {index} field {name + NONFINITE_SUFFIX!r} is not one of {', '.join(NONFINITE_MARKERS)}"
    return None
