"""Put a bundle's captured variable values (weights.npz) into live Keras objects: models and their optimizers.

Works for any live objects: a model loaded from ``model.keras``, or a model and optimizers the user's own program
just built. Unbuilt optimizers are built first (a ``LossScaleOptimizer`` with its inner optimizer), under the
optimizer's own name scope as ``apply`` would, so their slot variables exist and get the paths training gave them.

Values are matched to variables by variable path ("sequential/dense/kernel", "loss_scale_optimizer/dynamic_scale",
"adam/iteration"). Keras lets two optimizers share a name (``compile()`` under a mixed precision policy wraps its
optimizer in a LossScaleOptimizer named "loss_scale_optimizer", as the user's own first one is): a path the
capture holds k times pairs with the k live variables of that path, in order (capture and replay list optimizers
in the same order). The variables left over, whose paths were not captured (an optimizer built under another name
scope names its slots "adam/dense_kernel_momentum" instead of "loss_scale_optimizer/adam/
sequential_dense_kernel_momentum"; a second model in the process is "sequential_1/..."), take the captured values
not used by path, in order, when there are as many of each and every shape matches. Every assigned variable is
read back and compared with its value.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pyadapter.capture.keras_lines import model_variables, optimizer_variables
from pyadapter.capture.optimizers import build_optimizers
from pyadapter.capture.snapshot import unique, variable_path

# Captured values: path -> value, or (path, value) pairs in capture order, where a path may come more than once.
Captured = Mapping[str, np.ndarray] | Sequence[tuple[str, np.ndarray]]


def _pairs(captured: Captured) -> list[tuple[str, np.ndarray]]:
    return list(captured.items()) if isinstance(captured, Mapping) else list(captured)


class StateMismatch(ValueError):
    """The live variables do not match the captured values (one line): `assign_captured_state` with
    ``require_all``."""


def assign_captured_state(
    weights: Captured, model: Any, optimizers: list[Any], *, build: bool = True, require_all: bool = False
) -> list[str]:
    """Set every variable of `model` and of `optimizers` (a LossScaleOptimizer's inner optimizer included) from
    `weights` (captured values in capture order, as `CaptureBundle.weight_entries()` returns them).

    `model` is a keras.Model, a list of them, or None; `optimizers` may hold None. An optimizer that is not built
    yet is built on the models' trainable variables first (build one that trains only some of them yourself);
    ``build=False`` leaves unbuilt ones as they are (a re-entry that ran the step once has built every optimizer
    the step uses). Returns warnings, one line each: variables that got no captured value (they keep theirs) or
    did not take it. An empty list means every variable holds its captured value. With ``require_all``, variables
    that no captured value matches raise StateMismatch before anything is assigned.
    """
    weights = _pairs(weights)
    models = [m for m in (model if isinstance(model, (list, tuple)) else [model]) if m is not None]
    live_optimizers = unique([o for o in optimizers if o is not None])
    if build:
        build_optimizers(
            [o for o in live_optimizers if not unbuilt_at_capture(o, weights)],
            [v for m in models for v in m.trainable_variables],
        )
    variables = unique(
        [v for m in models for v in model_variables(m)]
        + [v for o in live_optimizers for v in optimizer_variables(o)]
    )
    if not variables:
        return []
    if not weights:
        return [f"the bundle holds no captured variable values; the {len(variables)} variables keep theirs"]

    values, unmatched, unused = match_captured(weights, variables)
    warnings: list[str] = []
    if unmatched:
        first = variable_path(variables[unmatched[0]])
        said = (
            f"{len(unmatched)} variables have no captured value (first: {first}; {len(unused)} captured values "
            "left that do not match them in number and shape)"
        )
        if require_all:
            raise StateMismatch(
                f"{len(unmatched)} of its variables have no captured value, the first {first}"
            )
        warnings.append(f"{said}; they keep their current values")
    wrong: list[str] = []
    for index, value in values.items():
        variable = variables[index]
        target = value.astype(_numpy_dtype(variable, value.dtype), copy=False)
        variable.assign(target)
        if not _same(np.asarray(variable.numpy()), target):
            wrong.append(variable_path(variable))
    if wrong:
        warnings.append(
            f"{len(wrong)} variables do not hold their captured value after assigning it (first: {wrong[0]})"
        )
    return warnings


def unbuilt_at_capture(optimizer: Any, weights: Captured) -> bool:
    """Whether `optimizer`, not built yet here, was not built at capture either: the bundle holds its own variables
    (iteration, learning rate) by path and nothing else under its name. A custom ``train_step`` that trains with
    optimizers of its own leaves the ``model.optimizer`` of a bare ``super().compile()`` unused (a GAN's RMSprop);
    building it here would only make slot variables the bundle has no values for."""
    if getattr(optimizer, "built", True):
        return False
    paths = [path for path, _ in _pairs(weights)]
    own = {variable_path(v) for v in optimizer_variables(optimizer)}
    if not own or not own <= set(paths):
        return False  # not captured under these paths: nothing tells, build it as before
    scopes = {path.split("/", 1)[0] for path in own}
    return not any(path.split("/", 1)[0] in scopes and path not in own for path in paths)


def match_captured(
    weights: Captured, variables: list[Any]
) -> tuple[dict[int, np.ndarray], list[int], list[str]]:
    """({variable index: captured value}, indices of variables left without a value, captured paths not used).

    By path first: a path held by as many captured values as live variables pairs them in order (once each, as a
    rule; twice for two optimizers of one name); a path whose counts differ is not used by path. Then the variables
    left over and the captured values left over pair in order, when there are as many of each and all their shapes
    and kinds match."""
    captured = _pairs(weights)
    by_path: dict[str, list[int]] = defaultdict(list)
    for position, (path, _) in enumerate(captured):
        by_path[path].append(position)
    live: dict[str, list[int]] = defaultdict(list)
    for index, variable in enumerate(variables):
        live[variable_path(variable)].append(index)
    values: dict[int, np.ndarray] = {}
    used: set[int] = set()
    for path, indices in live.items():
        positions = by_path.get(path, [])
        if len(positions) != len(indices):
            continue
        for index, position in zip(indices, positions, strict=True):
            if _fits(captured[position][1], variables[index]):
                values[index] = captured[position][1]
                used.add(position)
    rest = [i for i in range(len(variables)) if i not in values]
    left = [position for position in range(len(captured)) if position not in used]
    if (
        rest
        and len(rest) == len(left)
        and all(_fits(captured[p][1], variables[i]) for i, p in zip(rest, left, strict=True))
    ):
        for index, position in zip(rest, left, strict=True):
            values[index] = captured[position][1]
        rest, left = [], []
    return values, rest, [captured[position][0] for position in left]


def _fits(value: np.ndarray, variable: Any) -> bool:
    if tuple(np.shape(value)) != tuple(variable.shape):
        return False
    return _kind(np.asarray(value).dtype) == _kind(_numpy_dtype(variable, np.asarray(value).dtype))


def _kind(dtype: np.dtype) -> str:
    return "f" if dtype.kind in "fc" else "i" if dtype.kind in "iu" else dtype.kind


def _numpy_dtype(variable: Any, default: np.dtype) -> np.dtype:
    dtype = getattr(variable, "dtype", None)
    dtype = getattr(dtype, "as_numpy_dtype", dtype)  # tf.DType -> numpy type; Keras variables give a string
    try:
        return np.dtype(dtype)
    except TypeError:
        return np.dtype(default)


def _same(current: np.ndarray, expected: np.ndarray) -> bool:
    if current.shape != expected.shape:
        return False
    if current.dtype.kind in "fc":
        return bool(np.array_equal(current, expected, equal_nan=True))
    return bool(np.array_equal(current, expected))
