"""Zoo: an unbiased variance over a last batch of one sample (0 / 0).

A custom batch-standardization layer computes the unbiased variance sum((x - mean)^2) / (n - 1). The data set
has 257 rows and the batch size is 32, so the epoch's last batch has one row: n - 1 = 0 and the variance is
0 / 0 = NaN.
Fix: divide by n (the biased estimate, as BatchNormalization does), or ``drop_remainder`` the last batch.
"""
# CAUSE: op: a wrong op on finite, in-range inputs

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

FEATURES = 6


class BatchStandardize(keras.layers.Layer):
    def call(self, x: tf.Tensor) -> tf.Tensor:
        n = tf.cast(tf.shape(x)[0], x.dtype)
        mean = tf.reduce_mean(x, axis=0)
        variance = tf.reduce_sum(tf.square(x - mean), axis=0) / (n - 1.0)  # ORIGIN: n = 1 gives 0 / 0
        return (x - mean) / tf.sqrt(variance + 1e-5)


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(loc=5.0, scale=3.0, size=(257, FEATURES)).astype("float32")
    return x, (x[:, :1] - 5.0).astype("float32")


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential(
        [keras.Input(shape=(FEATURES,)), BatchStandardize(), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
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
