"""A scalar that a guarded step differentiates is a loss the gate checks before the update.

Keras's own steps compute their loss through ``model.compute_loss`` (or ``optimizer.scale_loss``), which the gate
records. A custom step (``guard_step`` on a ``tf.GradientTape`` loop, a ``train_step`` of one's own) often computes
its loss by hand and only hands it to ``tape.gradient``. Its loss can be NaN while every gradient stays finite: a
NaN term whose gradient does not reach the weights (0 / 0 for a class missing from the batch, gathered away in the
backward pass). Without this, such a step's update was applied and the step went by unnoticed although the
program printed a NaN loss.

While a guarded step is traced (or run eagerly), ``tf.GradientTape.gradient`` records its scalar floating targets
in the graph being traced. Targets built in another graph (an inner ``tf.function`` that takes gradients and
returns them) are left alone: the gate cannot use a tensor of another graph. Non-scalar targets (a critic's scores
differentiated for a gradient penalty) are not losses and are left alone too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf


def _is_scalar_float(value: Any) -> bool:
    if not isinstance(value, tf.Tensor) or not value.dtype.is_floating:
        return False
    return value.shape.rank == 0


@contextlib.contextmanager
def recording(
    record: Callable[[Any], Any], record_gradients: Callable[[Any, Any], Any] | None = None
) -> Iterator[None]:
    """Within the block, ``record(target)`` for each scalar floating target of ``GradientTape.gradient`` built in
    the graph that is current when the block starts (or eagerly, when it starts eagerly); with
    `record_gradients`, also ``record_gradients(sources, gradients)`` for each such call (a step that updates by
    hand, `pyadapter.capture.gate_manual`)."""
    eager = tf.executing_eagerly()
    graph = None if eager else tf.compat.v1.get_default_graph()
    original = tf.GradientTape.gradient

    def here() -> bool:
        if eager:
            return tf.executing_eagerly()
        return not tf.executing_eagerly() and tf.compat.v1.get_default_graph() is graph

    def gradient(self: tf.GradientTape, target: Any, sources: Any, *args: Any, **kwargs: Any) -> Any:
        for value in tf.nest.flatten(target):
            if not _is_scalar_float(value):
                continue
            if eager:
                if tf.executing_eagerly():
                    record(value)
            elif getattr(value, "graph", None) is graph:
                record(value)
        result = original(self, target, sources, *args, **kwargs)
        if record_gradients is not None and here():
            record_gradients(sources, result)
        return result

    tf.GradientTape.gradient = gradient  # the class: the user's tapes are made inside the step
    try:
        yield
    finally:
        tf.GradientTape.gradient = original
