"""Zoo: exp overflow in a hand-written softmax.

The model's last layer is a softmax written by hand as exp(z) / sum(exp(z)). The inputs are raw, unscaled
measurements (hundreds), so logits exceed 88 and exp overflows float32 to +inf; inf / inf is NaN.
Fix: subtract the row maximum before exp (or use ``tf.nn.softmax``).
"""
# CAUSE: op: a wrong op on finite, in-range inputs

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

CLASSES = 3
FEATURES = 8


class NaiveSoftmax(keras.layers.Layer):
    def call(self, logits: tf.Tensor) -> tf.Tensor:
        exp = tf.exp(logits)  # ORIGIN: exp(z) overflows to inf for z > 88; subtract the max first
        return exp / tf.reduce_sum(exp, axis=-1, keepdims=True)


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, size=384)
    x = (rng.normal(size=(384, FEATURES)) * 40.0 + 200.0 * labels[:, None]).astype("float32")
    return x, keras.utils.to_categorical(labels, CLASSES).astype("float32")


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential(
        [keras.Input(shape=(FEATURES,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(CLASSES), NaiveSoftmax()]
    )
    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="categorical_crossentropy")
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
