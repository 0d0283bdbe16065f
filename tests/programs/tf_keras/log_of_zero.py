"""Keras 2 form of zoo_log_of_zero: log of zero in a hand-written cross-entropy (Sequential, SGD)."""

import os
import sys

import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

CLASSES = 4
FEATURES = 16


def make_data(n=1024, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 6.0, size=(CLASSES, FEATURES)).astype("float32")
    labels = rng.integers(0, CLASSES, size=n)
    x = centers[labels] + rng.normal(0.0, 1.0, size=(n, FEATURES)).astype("float32")
    return x, np.eye(CLASSES, dtype="float32")[labels]


def cross_entropy(y_true, probs):
    log_probs = tf.math.log(probs)  # ORIGIN: log(0) = -inf once a probability underflows to 0
    return -tf.reduce_sum(y_true * log_probs, axis=-1)


def main():
    tf.keras.utils.set_random_seed(0)
    x, y = make_data()
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(32, activation="relu", input_shape=(FEATURES,)),
        tf.keras.layers.Dense(CLASSES, activation="softmax"),
    ])
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.5), loss=cross_entropy)
    guard = NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))
    history = model.fit(x, y, batch_size=64, epochs=5, shuffle=False, verbose=0, callbacks=[guard])
    return model, history


if __name__ == "__main__":
    model, history = main()
    weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
    non_finite = model.stop_training or not np.all(np.isfinite(history.history.get("loss", []))) or not weights_finite
    print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
    sys.exit(1 if non_finite else 0)
