"""Zoo: a NaN made inside a tf.data map function (log of a zero count).

The input pipeline log-transforms event counts in ``Dataset.map``. Some counts are 0, log(0) is -inf, and the
model's first layer turns -inf * w into -inf/+inf and then NaN. Nothing in the model is wrong; the -inf is made
by the pipeline, before the training step sees the batch.
Fix: ``tf.math.log1p(counts)``.
"""
# CAUSE: op: log of a legitimate zero count, made in the input pipeline (the data is right, the op is wrong)

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

FEATURES = 8


def make_counts(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    counts = rng.poisson(lam=20.0, size=(512, FEATURES)).astype("float32")
    counts[300, 2] = 0.0  # a sensor that saw no events in that window
    y = (counts.sum(axis=1, keepdims=True) / 160.0).astype("float32")
    return counts, y


def preprocess(counts: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    features = tf.math.log(counts)  # ORIGIN: log(0) = -inf for a zero count; use log1p
    return features, label


def make_dataset() -> tf.data.Dataset:
    counts, y = make_counts()
    return tf.data.Dataset.from_tensor_slices((counts, y)).map(preprocess).batch(32)


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    guard = NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))
    history = model.fit(make_dataset(), epochs=2, verbose=0, callbacks=[guard])
    return model, history


if __name__ == "__main__":
    model, history = main()
    losses = history.history.get("loss", [])
    weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
    non_finite = bool(model.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
    print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
    sys.exit(1 if non_finite else 0)
