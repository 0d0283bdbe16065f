"""Zoo: log of zero in a hand-written cross-entropy.

The model ends in a softmax and the loss takes ``tf.math.log`` of the probabilities without clipping. With a high
learning rate the logits grow within a few steps, a wrong-class probability underflows to exactly 0, log(0) is
-inf and 0 * -inf is NaN.
Fix: clip the probabilities before the log, or use ``CategoricalCrossentropy(from_logits=True)``.
"""
# CAUSE: op: a wrong op on finite, in-range inputs

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

CLASSES = 4
FEATURES = 16


def make_data(n: int = 1024, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 6.0, size=(CLASSES, FEATURES)).astype("float32")
    labels = rng.integers(0, CLASSES, size=n)
    x = centers[labels] + rng.normal(0.0, 1.0, size=(n, FEATURES)).astype("float32")
    return x, np.eye(CLASSES, dtype="float32")[labels]


def cross_entropy(y_true: tf.Tensor, probs: tf.Tensor) -> tf.Tensor:
    log_probs = tf.math.log(probs)  # ORIGIN: log(0) = -inf once a probability underflows to 0
    return -tf.reduce_sum(y_true * log_probs, axis=-1)


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential(
        [
            keras.Input(shape=(FEATURES,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(CLASSES, activation="softmax"),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.5), loss=cross_entropy)
    guard = NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))
    history = model.fit(x, y, batch_size=64, epochs=5, shuffle=False, verbose=0, callbacks=[guard])
    return model, history


if __name__ == "__main__":
    model, history = main()
    losses = history.history.get("loss", [])
    weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
    non_finite = bool(model.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
    print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
    sys.exit(1 if non_finite else 0)
