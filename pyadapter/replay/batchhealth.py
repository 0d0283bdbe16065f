"""Whether a bundle's captured batch already holds NaN/Inf: then the step only carried it, the data made it.

Reads the batch as numpy (no TensorFlow) and names the first bad values by position, the way a user indexes
the arrays they fed: ``x[170, 3] = nan``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyadapter.capture import batchcodec

MAX_EXAMPLES = 3


@dataclass
class BatchProblem:
    """The non-finite values of a captured batch."""

    total: int  # NaN/Inf values in the whole batch
    leaves: list[str] = field(default_factory=list)  # per array: "x: 1 NaN of 160"
    examples: list[str] = field(default_factory=list)  # the first few, "x[10, 3] = nan"
    nan: int = 0  # the whole batch's counts, over its floating arrays of ``size`` values
    pos_inf: int = 0
    neg_inf: int = 0
    size: int = 0

    def describe(self) -> str:
        """'the captured batch already holds 1 NaN/Inf value (x[10, 3] = nan)'."""
        plural = "value" if self.total == 1 else "values"
        shown = ", ".join(self.examples)
        if self.total > len(self.examples):
            shown += ", ..."
        return f"the captured batch already holds {self.total} NaN/Inf {plural} ({shown})"

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "leaves": list(self.leaves), "examples": list(self.examples)}


def _fmt(value: float) -> str:
    return "nan" if np.isnan(value) else ("inf" if value > 0 else "-inf")


def _leaves(batch: Any, name: str = "") -> list[tuple[str, Any]]:
    """(name, array) for every leaf, named as the user fed them: x / y / sample_weight for a Keras (x, y[, w])
    tuple, args[0] / kwargs['k'] for a custom loop's step arguments, keys and indices below that."""
    if isinstance(batch, dict):
        if not name and set(batch) <= {"args", "kwargs"}:
            args = [(f"args[{i}]", v) for i, v in enumerate(batch.get("args", []))]
            kwargs = [(f"kwargs[{k!r}]", v) for k, v in dict(batch.get("kwargs", {})).items()]
            return [leaf for label, value in args + kwargs for leaf in _leaves(value, label)]
        return [
            leaf
            for key, value in batch.items()
            for leaf in _leaves(value, f"{name}[{key!r}]" if name else str(key))
        ]
    if isinstance(batch, (list, tuple)):
        labels = ("x", "y", "sample_weight") if not name and len(batch) <= 3 else None
        return [
            leaf
            for index, value in enumerate(batch)
            for leaf in _leaves(value, labels[index] if labels else f"{name}[{index}]")
        ]
    return [(name or "batch", batch)]


def batch_problem(batch: Any) -> BatchProblem | None:
    """The NaN/Inf values of a captured batch (``CaptureBundle.batch()``), or None when it is all finite."""
    problem = BatchProblem(total=0)
    for name, value in _leaves(batch):
        if batchcodec.is_composite(value):  # a ragged/sparse leaf: its values, by their flat position
            name, value = f"{name}.values", batchcodec.values_of(value)
        if not isinstance(value, np.ndarray) or not np.issubdtype(value.dtype, np.floating):
            continue
        problem.size += int(value.size)
        bad = ~np.isfinite(value)
        count = int(bad.sum())
        if not count:
            continue
        problem.total += count
        nan, pos, neg = (
            int(np.isnan(value).sum()),
            int(np.isposinf(value).sum()),
            int(np.isneginf(value).sum()),
        )
        problem.nan, problem.pos_inf, problem.neg_inf = (
            problem.nan + nan,
            problem.pos_inf + pos,
            problem.neg_inf + neg,
        )
        parts = [f"{n} {label}" for n, label in ((nan, "NaN"), (neg, "-inf"), (pos, "+inf")) if n]
        problem.leaves.append(f"{name}: {', '.join(parts)} of {value.size}")
        for index in np.argwhere(bad)[: MAX_EXAMPLES - len(problem.examples)]:
            position = ", ".join(str(int(i)) for i in index)
            where = f"{name}[{position}]" if value.ndim else name
            problem.examples.append(f"{where} = {_fmt(float(value[tuple(index)]))}")
    return problem if problem.total else None
