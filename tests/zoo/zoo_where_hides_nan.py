"""Zoo: ``tf.where`` hides a NaN in the forward pass but not in the gradient.

An entropy bonus is written as where(p > 0, p * log(p), 0) to "avoid log(0)". The forward value is fine, but
the unselected branch still computes log(0) = -inf and 0 * -inf = NaN, and the gradient of ``tf.where`` sends
0 * (that branch's derivative) = 0 * -inf = NaN back into the model.
Fix: make the branch itself safe, e.g. ``tf.math.xlogy(p, p)`` or log(where(p > 0, p, 1)).
"""
# CAUSE: op: a wrong op on finite, in-range inputs

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

FEATURES = 12
SLOTS = 6


class ReluNormalize(keras.layers.Layer):
    """Sparse attention-like weights: relu then normalize, so some entries are exactly 0."""

    def call(self, z: tf.Tensor) -> tf.Tensor:
        r = tf.nn.relu(z)
        return r / (tf.reduce_sum(r, axis=-1, keepdims=True) + 1e-6)


def loss_with_entropy_bonus(y_true: tf.Tensor, p: tf.Tensor) -> tf.Tensor:
    mse = tf.reduce_mean(tf.square(y_true - p), axis=-1)
    plogp = tf.where(p > 0.0, p * tf.math.log(p), tf.zeros_like(p))  # ORIGIN: the masked branch is 0 * log(0) = NaN, and so is its gradient
    return mse + 0.01 * tf.reduce_sum(plogp, axis=-1)


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, FEATURES)).astype("float32")
    y = rng.dirichlet(np.ones(SLOTS), size=256).astype("float32")
    return x, y


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(SLOTS), ReluNormalize()])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss_with_entropy_bonus)
    guard = NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))
    history = model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0, callbacks=[guard])
    return model, history


if __name__ == "__main__":
    model, history = main()
    losses = history.history.get("loss", [])
    weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
    non_finite = bool(model.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
    print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
    sys.exit(1 if non_finite else 0)
