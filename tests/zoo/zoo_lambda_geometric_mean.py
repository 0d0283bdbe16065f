"""Zoo: a Lambda layer computing a geometric mean (log of ReLU zeros).

Geometric-mean pooling exp(mean(log(h))) over ReLU features. A ReLU output of exactly 0 gives log(0) = -inf; the
forward value exp(-inf) = 0 looks harmless, but the gradient of log at 0 is inf and 0 * inf is NaN.
Fix: log(h + epsilon), or pool something strictly positive (softplus).
"""
# CAUSE: op: a wrong op on finite, in-range inputs

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

STEPS = 5
FEATURES = 4


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, STEPS, FEATURES)).astype("float32")
    return x, x.mean(axis=(1, 2))[:, None].astype("float32")


def build_model() -> keras.Model:
    inputs = keras.Input(shape=(STEPS, FEATURES))
    h = keras.layers.Dense(8, activation="relu")(inputs)
    pooled = keras.layers.Lambda(lambda t: tf.exp(tf.reduce_mean(tf.math.log(t), axis=1)))(h)  # ORIGIN: log(0) = -inf for a ReLU output of 0
    return keras.Model(inputs, keras.layers.Dense(1)(pooled))


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = build_model()
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
