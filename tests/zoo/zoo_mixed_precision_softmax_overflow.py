"""Zoo: float16 overflow in a custom layer under mixed_float16 (a softmax written out by hand).

The model follows the mixed-precision guide: ``mixed_float16`` as the global policy, a float32 output layer, and
``compile`` wraps Adam in a ``LossScaleOptimizer`` by itself. ``AttentionPooling`` weights the time steps of a
sequence with a softmax written as ``exp(s) / sum(exp(s))``. Its compute dtype is float16, where ``exp`` overflows
to inf once a score passes ~11.1 (float16's largest value is 65504; in float32 it would take a score of ~88). As
training sharpens the scores, the first one past 11.1 turns that row into inf / inf = NaN, and the loss is NaN.
The loss scale optimizer does not help: it skips steps with overflowing gradients, but the forward pass itself
is NaN.
Fix: subtract the row maximum before ``exp`` (or use ``tf.nn.softmax``, or compute the scores in float32).

Training runs at module level, without a ``__main__`` guard, as many scripts do.
"""
# CAUSE: precision: exp overflows float16 past a score of ~11.1; float32 would hold it up to ~88

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

TIME_STEPS = 12
FEATURES = 8


class AttentionPooling(keras.layers.Layer):
    """Averages the time steps of (batch, time, features), weighted by a softmax of a learned score."""

    def build(self, input_shape: tuple[int, ...]) -> None:
        self.query = self.add_weight(shape=(input_shape[-1], 1), initializer="glorot_uniform", name="query")

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        scores = tf.matmul(inputs, self.query)  # (batch, time, 1), float16 under mixed_float16
        weights = tf.exp(scores)  # ORIGIN: exp overflows float16 (max 65504) once a score passes ~11.1
        weights = weights / tf.reduce_sum(weights, axis=1, keepdims=True)
        return tf.reduce_sum(weights * inputs, axis=1)


def make_data(n: int = 512, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Sequences with one marked time step; the target is that step's first feature."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, TIME_STEPS, FEATURES)).astype("float32")
    marked = rng.integers(0, TIME_STEPS, size=n)
    x[np.arange(n), marked, -1] = 4.0
    y = x[np.arange(n), marked, :1] * 3.0
    return x, y.astype("float32")


keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)
x, y = make_data()
model = keras.Sequential(
    [
        keras.Input(shape=(TIME_STEPS, FEATURES)),
        keras.layers.Dense(16, activation="relu"),
        AttentionPooling(),
        keras.layers.Dense(1, dtype="float32"),  # outputs in float32, as the guide says
    ]
)
model.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse")  # becomes a LossScaleOptimizer(Adam)
history = model.fit(
    x, y, batch_size=32, epochs=10, shuffle=False, verbose=0,
    callbacks=[NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))],
)

losses = history.history.get("loss", [])
weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
non_finite = bool(model.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
sys.exit(1 if non_finite else 0)
