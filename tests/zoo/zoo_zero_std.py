"""Zoo: division by a zero standard deviation.

The loss standardizes the targets of each batch by the batch's own mean and standard deviation. The data is
sorted by group, and one group's targets are all the same value: in that batch std is exactly 0 and
(y - mean) / std is 0 / 0 = NaN.
Fix: divide by ``std + epsilon`` (or standardize once, over the whole data set).
"""
# CAUSE: op: a wrong op on finite, in-range inputs

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

FEATURES = 8


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Four groups of 64 rows, sorted by group; group 2's target is a constant (a saturated sensor)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, FEATURES)).astype("float32")
    y = rng.normal(loc=3.0, size=(256, 1)).astype("float32")
    y[128:192] = 5.0
    return x, y


def standardized_mse(y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
    mean = tf.reduce_mean(y_true)
    std = tf.math.reduce_std(y_true)
    z_true = (y_true - mean) / std  # ORIGIN: a batch of identical targets has std 0 -> 0/0
    z_pred = (y_pred - mean) / (std + 1e-6)
    return tf.reduce_mean(tf.square(z_true - z_pred), axis=-1)


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=standardized_mse)
    guard = NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))
    history = model.fit(x, y, batch_size=64, epochs=2, shuffle=False, verbose=0, callbacks=[guard])
    return model, history


if __name__ == "__main__":
    model, history = main()
    losses = history.history.get("loss", [])
    weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
    non_finite = bool(model.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
    print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
    sys.exit(1 if non_finite else 0)
