"""Zoo: a NaN that exists only in the backward pass (the gradient of sqrt at 0).

A "spread" regularizer pushes a batch's embeddings apart using their pairwise Euclidean distances,
sqrt(sum((e_i - e_j)^2)). The pairs include i == j, whose distance is exactly 0: the forward value sqrt(0) = 0 is
fine, but d sqrt(u)/du = 1 / (2 sqrt(u)) is inf at 0, and inf * 0 = NaN in every gradient. The loss never shows
a NaN; the weights do after the first update.
Fix: sqrt(u + epsilon), or leave out the diagonal.
"""
# CAUSE: op: a wrong op on finite, in-range inputs

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

FEATURES = 10
EMBED = 4


def spread_loss(y_true: tf.Tensor, embeddings: tf.Tensor) -> tf.Tensor:
    fit = tf.reduce_mean(tf.square(y_true - embeddings), axis=-1)
    diff = embeddings[:, None, :] - embeddings[None, :, :]
    distances = tf.sqrt(tf.reduce_sum(tf.square(diff), axis=-1))  # ORIGIN: d/du sqrt(u) is inf at u = 0 (i == j)
    return fit - 0.01 * tf.reduce_mean(distances, axis=-1)


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, FEATURES)).astype("float32")
    return x, np.tanh(x[:, :EMBED]).astype("float32")


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(EMBED)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=spread_loss)
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
