"""Zoo: a subclassed Keras model (rsqrt of a zero norm in call).

``Encoder.call`` L2-normalizes its hidden ReLU features by hand with rsqrt(sum(h^2)). When every ReLU unit of a
sample is off, sum(h^2) is 0, rsqrt(0) is inf and 0 * inf is NaN.
Fix: ``tf.math.l2_normalize(h, axis=-1)`` (it adds an epsilon), or rsqrt(sum + 1e-12).
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


class Encoder(keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = keras.layers.Dense(8, activation="relu", bias_initializer=keras.initializers.Constant(-1.0))
        self.head = keras.layers.Dense(1)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        h = self.hidden(inputs)
        h = h * tf.math.rsqrt(tf.reduce_sum(tf.square(h), axis=-1, keepdims=True))  # ORIGIN: rsqrt(0) = inf when all units are off
        return self.head(h)


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(scale=0.3, size=(256, FEATURES)).astype("float32")
    return x, x.sum(axis=1, keepdims=True).astype("float32")


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = Encoder()
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
