"""Which array of the captured batch an op outside its domain read, when the dump cannot say.

A loss that takes ``log(y_true)`` or divides by a target reads the batch straight from the step's arguments, and a
tfdbg2 dump records no health for a function's arguments: the origin's input reads "unknown" and the cause could
only say "keep its inputs in its domain". The batch is in the bundle, so the op is applied here to each of its
float arrays in NumPy; an array that gives exactly the NaN/-inf/+inf counts the dump recorded for the op's output
is the one it read. Exact counts over the same number of values single it out; a mere zero somewhere (a one-hot
label, a ReLU feature) does not.

NumPy only; runs nothing of the bundle's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pyadapter.capture.records import BadElement, leaves
from pyadapter.cause.ops import DIVISION_OPS
from pyadapter.findings import Finding, TensorHealth


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1.0 / np.sqrt(x)


def _reciprocal(x: np.ndarray) -> np.ndarray:
    return 1.0 / x


# Elementwise ops of one input, as NumPy computes them (the same IEEE results: log(0) = -inf, sqrt(-1) = NaN).
UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Log": np.log,
    "Log1p": np.log1p,
    "Sqrt": np.sqrt,
    "Rsqrt": _rsqrt,
    "Reciprocal": _reciprocal,
    "Inv": _reciprocal,
    "Acos": np.arccos,
    "Asin": np.arcsin,
    "Atanh": np.arctanh,
    "Acosh": np.arccosh,
}
# Divisions whose denominator (input 1) may be a batch array: x / 0 is +-inf, 0 / 0 NaN.
DENOMINATOR_OPS = frozenset(DIVISION_OPS - {"DivNoNan", "Reciprocal", "Inv"})


@dataclass(frozen=True)
class BatchInput:
    """The batch array an op read outside its domain: its first such value and how many there were."""

    element: BadElement  # label, row, index and value of the first value that made NaN/Inf
    count: int  # values of the array that made NaN/Inf
    zeros: int
    negatives: int
    # The constant the op's input added to the array (``log(y_true + 1.0)``: 1.0); zeros and negatives count the
    # shifted values, `element` holds the array's own.
    shift: float = 0.0
    bad_rows: int = 0  # records (rows) holding at least one such value; 0: not counted

    def _kinds(self) -> list[tuple[int, str, str]]:
        """(count, one, many) of each kind of bad value present; count >= 1, so there is at least one kind."""
        rest = self.count - self.zeros - self.negatives
        kinds = [
            (self.zeros, "zero", "zeros"),
            (self.negatives, "negative value", "negative values"),
            (rest, "value outside its domain", "values outside its domain"),
        ]
        return [kind for kind in kinds if kind[0] > 0]

    def values_text(self) -> str:
        """'1 zero', '3 negative values', '2 zeros and 1 negative value', '4 values outside its domain'."""
        return " and ".join(f"{n} {one if n == 1 else many}" for n, one, many in self._kinds())

    def kinds_text(self) -> str:
        """What the bad values are, without counts: 'zeros', 'negative values', 'zeros or negative values'."""
        return " or ".join(many for _, _, many in self._kinds())


def _counts(values: np.ndarray) -> tuple[int, int, int]:
    return int(np.isnan(values).sum()), int(np.isneginf(values).sum()), int(np.isposinf(values).sum())


def _explains(bad: np.ndarray, out: np.ndarray | None, health: TensorHealth) -> bool:
    if not bad.any():
        return False
    if out is None:  # a division: each zero denominator made one NaN or Inf
        return int(bad.sum()) == health.nan + health.neg_inf + health.pos_inf
    return _counts(out) == (health.nan, health.neg_inf, health.pos_inf)


def _explaining_array(batch: object, health: TensorHealth, op: str, shift: float = 0.0) -> BatchInput | None:
    """The first float array of the batch, of the op's size, whose values (plus `shift`) make exactly the op's
    NaN/Inf through `op` (a unary op as NumPy computes it; a division: its zeros as the divisor)."""
    for label, value, _ in leaves(batch):
        if (
            not isinstance(value, np.ndarray)
            or not np.issubdtype(value.dtype, np.floating)
            or value.ndim == 0
            or value.size != health.size
        ):
            continue
        with np.errstate(all="ignore"):
            moved = value + value.dtype.type(shift) if shift else value
            out = UNARY[op](moved) if op in UNARY else None
        bad = ~np.isfinite(out) if out is not None else moved == 0
        if not _explains(bad, out, health):
            continue
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        return BatchInput(
            element=BadElement(label, index[0], index, float(value[index]), int(value.shape[0])),
            count=int(bad.sum()),
            zeros=int((bad & (moved == 0)).sum()),
            negatives=int((bad & (moved < 0)).sum()),
            shift=shift,
            bad_rows=int(bad.reshape(len(bad), -1).any(axis=1).sum()),
        )
    return None


def batch_input(origin: Finding, batch: object) -> BatchInput | None:
    """The batch array that explains `origin`'s NaN/Inf when one of its inputs has no recorded health, else None."""
    health = origin.health
    op = origin.op.type
    if health is None or health.size is None or batch is None:
        return None
    unknown = [index for index, i in enumerate(origin.inputs) if i.health is None]
    if op in UNARY:
        if unknown != [0] or len(origin.inputs) != 1:
            return None
    elif op in DENOMINATOR_OPS:
        if 1 not in unknown or len(origin.inputs) != 2:
            return None
    else:
        return None
    return _explaining_array(batch, health, op)


def shifted_batch_input(origin: Finding, batch: object, shifts: list[float]) -> BatchInput | None:
    """The batch array that explains a one-input op's NaN/Inf once a constant of `shifts` is added to it (an RMSLE
    loss's ``log(y_true + 1.0)`` of targets standardized below -1), when the op's recorded input holds negatives and
    the array's values go below -shift; None otherwise."""
    health = origin.health
    op = origin.op.type
    if op not in UNARY or len(origin.inputs) != 1 or health is None or health.size is None or batch is None:
        return None
    seen = origin.inputs[0].health
    if seen is None or not seen.neg:
        return None
    for shift in shifts:
        found = _explaining_array(batch, health, op, shift)
        # Values below -shift (z-scores under a log of y + 1); a value of exactly -shift is a record's sentinel (a
        # price of -1 for "unknown"), which the rows of the batch name as a record.
        if found is not None and found.negatives:
            return found
    return None
