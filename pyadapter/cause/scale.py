"""Inputs fed to a model without scaling: raw features (areas in m^2, prices, pixels in 0-255) or targets in the
hundreds or more, into a model with no normalizing layer.

A learning rate that is usual for standardized inputs (SGD's 0.01, Adam's 1e-3) makes every step overshoot when a
feature's values are in the hundreds: the first layer's gradient scales with the input, the loss grows by orders
of magnitude per step, and an op overflows within a few steps. The history then reads as a divergence at that rate,
and "lower the learning rate" (to 1e-5) is the wrong advice: the inputs are what to change. Pure reading of the
captured batch (NumPy arrays); the model's layers come from its saved config, never from running it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyadapter.cause import change_line

# Standardized features have an RMS about 1, pixels scaled to [0, 1] below 1; an RMS of 10 and more is raw units.
FEATURE_RMS_LIMIT = 10.0
# Features in the hundreds and more are the first thing to change at a usual rate; in the tens, the rate stays first
# (a rate that overshoots there is too high for scaled inputs too, only less so).
FIRST_CHANGE_RMS = 100.0
# A regression target in the hundreds (a price in dollars) under a squared error makes losses of 1e4 and more.
TARGET_RMS_LIMIT = 100.0
# Layers that bring the inputs to a usual scale (or make the first layer's activations independent of it).
NORMALIZING_LAYERS = frozenset(
    {
        "Normalization",
        "Rescaling",
        "BatchNormalization",
        "LayerNormalization",
        "GroupNormalization",
        "UnitNormalization",
        "Discretization",
        "CategoryEncoding",
    }
)
_SHOWN_COLUMNS = 3


def usual_rate(optimizer: str | None, rate: float | None) -> bool:
    """Whether `rate` is at most the optimizer's Keras default, what it is tuned for on inputs of about unit
    scale (unknown rates count as usual): above it, the rate is the first thing to change even on unscaled
    inputs."""
    if rate is None:
        return True
    default = change_line.DEFAULT_LEARNING_RATES.get((optimizer or "").lower(), 0.001)
    return rate <= default * 1.0001


@dataclass(frozen=True)
class ColumnScale:
    """One feature column (or a whole image input: ``column`` None) with values of a large scale."""

    column: int | None
    rms: float
    low: float
    high: float


@dataclass(frozen=True)
class UnscaledInput:
    """What of the captured batch is not scaled: ``role`` "features" or "targets", ``name`` the batch part."""

    role: str
    name: str
    columns: tuple[ColumnScale, ...]

    @property
    def first_to_change(self) -> bool:
        """Whether the scale, more than a usual learning rate, is what to change (`FIRST_CHANGE_RMS`)."""
        return max(c.rms for c in self.columns) >= FIRST_CHANGE_RMS

    def describe(self) -> str:
        shown = []
        for col in self.columns[:_SHOWN_COLUMNS]:
            where = f"{self.name}[:, {col.column}]" if col.column is not None else self.name
            shown.append(f"{where} from {col.low:.3g} to {col.high:.3g}, RMS {col.rms:.3g}")
        more = len(self.columns) - len(shown)
        return "; ".join(shown) + (f"; {more} more column{'s' if more != 1 else ''}" if more > 0 else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "name": self.name,
            "columns": [
                {"column": c.column, "rms": float(f"{c.rms:.4g}"), "low": float(c.low), "high": float(c.high)}
                for c in self.columns
            ],
        }


def _float_array(value: Any) -> np.ndarray | None:
    if not isinstance(value, np.ndarray) or value.dtype.kind != "f" or value.size == 0 or value.ndim == 0:
        return None
    values = value.astype(np.float64, copy=False)
    # NaN/Inf in the batch is a data cause, not a scale.
    return values if np.all(np.isfinite(values)) else None


def _rms_but_the_largest(values: np.ndarray) -> np.ndarray:
    """Each column's RMS without its largest |value| (with 4 rows and more): one record of 1e21 among values of
    about 1 is a bad record, not a feature in raw units, and its own cause (`pyadapter.cause.rows`)."""
    squares = np.square(values)
    if values.shape[0] < 4:
        return np.sqrt(np.mean(squares, axis=0))
    # Zeroed, not subtracted: 1e42 + 1 - 1e42 is 0 in float64.
    squares[np.argmax(squares, axis=0), np.arange(values.shape[1])] = 0.0
    return np.sqrt(squares.sum(axis=0) / (values.shape[0] - 1))


def _large_columns(values: np.ndarray, limit: float) -> tuple[ColumnScale, ...]:
    """Columns of a table (rows x features) whose RMS passes `limit`, largest first; a single column, an image or
    a sequence input counts as one."""
    if values.ndim == 2 and 1 < values.shape[1] <= 4096:
        rms = _rms_but_the_largest(values)
        found = [
            ColumnScale(int(i), float(rms[i]), float(values[:, i].min()), float(values[:, i].max()))
            for i in np.flatnonzero(rms >= limit)
        ]
        return tuple(sorted(found, key=lambda c: -c.rms))
    if values.ndim <= 2 and values.size == values.shape[0]:  # one column
        rms_all = float(_rms_but_the_largest(values.reshape(-1, 1))[0])
    else:
        rms_all = float(np.sqrt(np.mean(np.square(values))))
    if rms_all >= limit:
        return (ColumnScale(None, rms_all, float(values.min()), float(values.max())),)
    return ()


def _probabilities(values: np.ndarray) -> bool:
    """Whether every finite value lies in [0, 1] (labels as one-hot rows, multi-label flags, smoothed targets)."""
    finite = values[np.isfinite(values)]
    return finite.size == 0 or bool(finite.min() >= 0.0 and finite.max() <= 1.0)


def _leaves(value: Any, name: str) -> Iterable[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{name}[{key!r}]" if name else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{name}[{index}]")
    else:
        yield name, value


def _unscaled(value: Any, role: str, name: str, limit: float) -> UnscaledInput | None:
    for leaf_name, leaf in _leaves(value, name):
        values = _float_array(leaf)
        if values is None:
            continue
        if role == "targets" and values.ndim == 2 and values.shape[1] > 1 and _probabilities(values):
            # One-hot, multi-label or smoothed targets are not regression values; several regression outputs (a
            # DQN's Q-value targets of rewards in dollars, s42a p5) are.
            continue
        columns = _large_columns(values, limit)
        if columns:
            return UnscaledInput(role, leaf_name, columns)
    return None


def unscaled_inputs(
    batch: Any, layer_classes: Iterable[str] | None, names: tuple[str, str] = ("x", "y")
) -> list[UnscaledInput]:
    """The parts of a Keras fit batch ``(x, y[, sample_weight])`` (or a custom step's first two arguments, named
    `names`) with values of a large scale: the first such feature input, then the first such target; empty when
    nothing is, the batch is of another shape, or (for the features) the model has a normalizing layer
    (`NORMALIZING_LAYERS`: what reaches its first weights is then scaled whatever the batch holds)."""
    if isinstance(batch, np.ndarray):
        batch = (batch,)  # fit(x) with no targets (an autoencoder, a VAE): its batch is x alone
    if not isinstance(batch, tuple) or not batch:
        return []
    found = []
    if layer_classes is None or not NORMALIZING_LAYERS.intersection(layer_classes):
        found.append(_unscaled(batch[0], "features", names[0], FEATURE_RMS_LIMIT))
    if len(batch) > 1:
        found.append(_unscaled(batch[1], "targets", names[1], TARGET_RMS_LIMIT))
    return [item for item in found if item is not None]


def layer_classes(config: Any) -> set[str]:
    """Every ``class_name`` in a Keras model config (layers nested in models and wrappers included)."""
    found: set[str] = set()
    stack = [config]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            name = item.get("class_name")
            if isinstance(name, str):
                found.add(name)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


# Keras's Normalization divides by max(sqrt(variance), epsilon): a variance at or below this is a constant feature.
ZERO_VARIANCE = 1e-12
KERAS_EPSILON = 1e-7


@dataclass
class ZeroVariance:
    """A Normalization layer's statistics (from a bundle's weights) where some features had variance 0."""

    layer: str  # its path, "normalization"
    features: list[int]  # the features of variance 0 (along its last axis)
    means: list[float]  # their means
    size: int  # how many features the layer normalizes


@dataclass
class UnscaledFeature:
    """A feature of the failing batch that a zero-variance Normalization scales by 1 / 1e-7."""

    layer: str
    feature: int
    mean: float
    value: float  # a value of the batch there that is not the mean
    rows: int  # rows of the batch holding such values

    @property
    def scaled(self) -> float:
        return (self.value - self.mean) / KERAS_EPSILON

    def to_json(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "feature": self.feature,
            "mean": self.mean,
            "value": self.value,
            "rows": self.rows,
        }


def zero_variances(stats: dict[str, Any]) -> list[ZeroVariance]:
    """From ``{path: value}`` of a bundle's ``.../mean`` and ``.../variance`` variables (Keras's Normalization;
    BatchNormalization's are ``moving_*``): the layers with a constant feature, not every feature constant."""
    found = []
    for path, variance in stats.items():
        if not path.endswith("/variance"):
            continue
        layer = path.removesuffix("/variance")
        mean = stats.get(f"{layer}/mean")
        variance = np.asarray(variance)
        if mean is None or np.shape(mean) != variance.shape or variance.dtype.kind != "f":
            continue
        flat, means = variance.reshape(-1), np.asarray(mean, dtype=np.float64).reshape(-1)
        zero = np.flatnonzero(flat <= ZERO_VARIANCE)
        if 0 < zero.size < flat.size:
            found.append(ZeroVariance(layer, zero.tolist(), [float(means[i]) for i in zero], int(flat.size)))
    return found


def unscaled_feature(layers: list[ZeroVariance], batch: Any) -> UnscaledFeature | None:
    """The first feature of variance 0 that the failing batch holds another value in (an array of the batch whose
    last axis has the layer's size), or None."""
    from pyadapter.capture.records import leaves

    if not layers or batch is None:
        return None
    arrays = [
        a for _, a, _ in leaves(batch) if isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.ndim >= 1
    ]
    for layer in layers:
        for array in (a for a in arrays if a.shape[-1] == layer.size):
            for feature, mean in zip(layer.features, layer.means, strict=True):
                column = array[..., feature].astype(np.float64)
                differ = np.isfinite(column) & (np.abs(column - mean) > 1e-6 * max(1.0, abs(mean)))
                if differ.any():
                    rows = int(differ.reshape(len(array), -1).any(axis=1).sum())
                    value = float(column[differ].flat[0])
                    return UnscaledFeature(layer.layer.rsplit("/", 1)[-1], feature, mean, value, rows)
    return None
