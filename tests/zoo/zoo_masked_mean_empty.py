"""Zoo: a masked mean over a batch where every label is masked (0 / 0).

Labels of -1 mean "no label" (e.g. unannotated frames). The loss averages only over labelled rows:
sum(loss * mask) / sum(mask). The data is ordered by recording, and one recording has no labels at all: in that
batch sum(mask) is 0 and the mean is 0 / 0 = NaN.
Fix: ``tf.math.divide_no_nan`` or divide by ``tf.maximum(count, 1.0)``.
"""
# CAUSE: op: a wrong op on finite, in-range inputs

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

FEATURES = 12


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(320, FEATURES)).astype("float32")
    y = (x[:, :1] > 0).astype("float32")
    y[192:256] = -1.0  # the third recording was never annotated
    return x, y


def masked_bce(y_true: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    mask = tf.cast(y_true >= 0.0, tf.float32)
    per_row = tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.maximum(y_true, 0.0), logits=logits)
    return tf.reduce_sum(per_row * mask) / tf.reduce_sum(mask)  # ORIGIN: 0/0 when the batch has no labelled row


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=masked_bce)
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
