"""A mixed-precision Keras program with a float16 bug, guarded by NanGuard; records what the test compares with.

``mixed_float16`` is set inside ``main`` (so importing this script, as a replay does, leaves the global policy
float32: the replay must bring the policy and the LossScaleOptimizer back from the bundle itself). ``compile``
wraps Adam in a LossScaleOptimizer. ``AttentionPooling`` computes ``exp`` of its scores in float16, which
overflows once a score passes ~11.1: inf / inf = NaN, and NanGuard captures that step.

Usage: mixed_precision_fit.py CAPTURE_DIR OUT.npz. OUT.npz holds, for the step before the failing one and for
the failing one, every model and optimizer variable as it was when the step began (``<tag>/<index>``, paths in
``paths``), that step's batch (``<tag>_x``, ``<tag>_y``) and its number (``<tag>_batch``, counting batches from 0).
"""

from __future__ import annotations

import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

TIME_STEPS = 12
FEATURES = 8
BATCH = 32


class AttentionPooling(keras.layers.Layer):
    def build(self, input_shape: tuple[int, ...]) -> None:
        self.query = self.add_weight(shape=(input_shape[-1], 1), initializer="glorot_uniform", name="query")

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        scores = tf.matmul(inputs, self.query)
        weights = tf.exp(scores)  # ORIGIN: float16 exp overflows past a score of ~11.1
        weights = weights / tf.reduce_sum(weights, axis=1, keepdims=True)
        return tf.reduce_sum(weights * inputs, axis=1)


def make_data(n: int = 512, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, TIME_STEPS, FEATURES)).astype("float32")
    marked = rng.integers(0, TIME_STEPS, size=n)
    x[np.arange(n), marked, -1] = 4.0
    return x, (x[np.arange(n), marked, :1] * 3.0).astype("float32")


class StateBeforeEachStep(keras.callbacks.Callback):
    """Keeps the model and optimizer values as each step begins, for the last two steps."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[tuple[int, list[str], list[np.ndarray]]] = []
        self.seen = 0

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        variables = [*self.model.variables, *self.model.optimizer.variables]
        self.steps = [*self.steps[-1:], (self.seen, [v.path for v in variables], [v.numpy() for v in variables])]
        self.seen += 1


def main(capture_dir: str, out: str) -> int:
    keras.mixed_precision.set_global_policy("mixed_float16")
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential(
        [
            keras.Input(shape=(TIME_STEPS, FEATURES)),
            keras.layers.Dense(16, activation="relu"),
            AttentionPooling(),
            keras.layers.Dense(1, dtype="float32"),
        ]
    )
    # jit_compile off as the replay runs it, so the replayed step can be compared bit for bit.
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse", jit_compile=False)
    recorder = StateBeforeEachStep()
    model.fit(x, y, batch_size=BATCH, epochs=10, shuffle=False, verbose=0, callbacks=[recorder, NanGuard(capture_dir)])
    batches = len(x) // BATCH
    arrays: dict[str, np.ndarray] = {}
    for tag, (seen, paths, values) in zip(("before", "failing"), recorder.steps, strict=True):
        arrays.update({f"{tag}/{i:03d}": value for i, value in enumerate(values)})
        rows = slice((seen % batches) * BATCH, (seen % batches + 1) * BATCH)
        arrays.update({f"{tag}_x": x[rows], f"{tag}_y": y[rows], f"{tag}_batch": np.array(seen)})
        arrays["paths"] = np.array(paths)
    np.savez(out, **arrays)
    print("stopped by NanGuard" if model.stop_training else "training stayed finite")
    return 0 if model.stop_training else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
