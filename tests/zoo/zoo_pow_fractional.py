"""Zoo: a fractional power of a negative number.

A "power-law" activation layer computes x ** 0.75 to compress large activations. It follows a Dense layer with
no activation, so some inputs are negative, and a negative base with a fractional exponent is NaN.
Fix: apply it to a non-negative quantity, e.g. ``tf.sign(x) * tf.pow(tf.abs(x), 0.75)``.
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


class PowerCompress(keras.layers.Layer):
    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return tf.pow(inputs, 0.75)  # ORIGIN: negative ** 0.75 is NaN


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, FEATURES)).astype("float32")
    return x, np.sin(x[:, :1]).astype("float32")


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential(
        [keras.Input(shape=(FEATURES,)), keras.layers.Dense(16), PowerCompress(), keras.layers.Dense(1)]
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
