"""Zoo: a hand-written binary cross-entropy on a saturated sigmoid (log of zero).

-(y log p + (1 - y) log(1 - p)) with p = sigmoid(z). The features are unscaled, so |z| quickly exceeds ~17,
where sigmoid(z) rounds to exactly 1.0 in float32: log(1 - p) = log(0) = -inf, and (1 - y) * -inf is NaN for
every positive example.
Fix: ``keras.losses.BinaryCrossentropy(from_logits=True)`` on z, or clip p into [eps, 1 - eps].
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


def bce(y_true: tf.Tensor, p: tf.Tensor) -> tf.Tensor:
    return -tf.reduce_mean(y_true * tf.math.log(p) + (1.0 - y_true) * tf.math.log(1.0 - p), axis=-1)  # ORIGIN: log(1 - p) = log(0) once p rounds to 1


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(scale=25.0, size=(512, FEATURES)).astype("float32")
    return x, (x[:, :1] + x[:, 1:2] > 0).astype("float32")


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=bce)
    guard = NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))
    history = model.fit(x, y, batch_size=32, epochs=3, shuffle=False, verbose=0, callbacks=[guard])
    return model, history


if __name__ == "__main__":
    model, history = main()
    losses = history.history.get("loss", [])
    weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
    non_finite = bool(model.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
    print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
    sys.exit(1 if non_finite else 0)
