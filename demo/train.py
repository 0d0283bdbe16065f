"""NaN Lens demo: a small classifier whose loss turns NaN after a few dozen steps.

The bug is the classic one: a hand-written cross-entropy takes ``tf.math.log`` of a softmax without clipping.
Once the model grows confident, the softmax of a wrong class underflows to exactly 0, log(0) is -inf, and
0 * -inf is NaN. The data is generated here (no downloads).

Run it plain (`python demo/train.py`) to see the loss go NaN, or let `scripts/demo` run it under NanGuard.
"""

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

NUM_CLASSES = 10
FEATURES = 32


def make_data(n: int = 4096, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Well separated Gaussian blobs: easy to fit, so the softmax saturates quickly."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 4.0, size=(NUM_CLASSES, FEATURES)).astype("float32")
    labels = rng.integers(0, NUM_CLASSES, size=n)
    x = centers[labels] + rng.normal(0.0, 1.0, size=(n, FEATURES)).astype("float32")
    y = np.eye(NUM_CLASSES, dtype="float32")[labels]
    return x, y


def cross_entropy(y_true: tf.Tensor, probs: tf.Tensor) -> tf.Tensor:
    """Cross-entropy on probabilities, written by hand (the bug: no clipping before the log)."""
    log_probs = tf.math.log(probs)  # BUG: log(0) = -inf once a softmax entry underflows
    return -tf.reduce_sum(y_true * log_probs, axis=-1)


def build_model() -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input(shape=(FEATURES,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(NUM_CLASSES),
            keras.layers.Softmax(),
        ]
    )
    # A learning rate this high makes the logits explode within an epoch: the NaN then comes from the log.
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.5), loss=cross_entropy)
    return model


def main(callbacks: list | None = None) -> keras.callbacks.History:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = build_model()
    return model.fit(x, y, batch_size=64, epochs=3, shuffle=False, callbacks=callbacks or [], verbose=2)


if __name__ == "__main__":
    callbacks = []
    capture_dir = os.environ.get("NANLENS_CAPTURE_DIR")
    if capture_dir:
        from pyadapter import NanGuard

        callbacks.append(NanGuard(capture_dir))
    history = main(callbacks)
    losses = history.history.get("loss", [])
    sys.exit(0 if losses and np.isfinite(losses[-1]) else 1)
