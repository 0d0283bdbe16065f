"""Keras 2 form of zoo_lambda_geometric_mean: a Lambda layer computing a geometric mean (log of ReLU zeros)."""

import os
import sys

import numpy as np
import tensorflow as tf
from tensorflow import keras

from pyadapter import NanGuard

STEPS = 5
FEATURES = 4


def make_data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, STEPS, FEATURES)).astype("float32")
    return x, x.mean(axis=(1, 2))[:, None].astype("float32")


def build_model():
    inputs = keras.Input(shape=(STEPS, FEATURES))
    h = keras.layers.Dense(8, activation="relu")(inputs)
    pooled = keras.layers.Lambda(lambda t: tf.exp(tf.reduce_mean(tf.math.log(t), axis=1)))(h)  # ORIGIN: log(0) = -inf
    return keras.Model(inputs, keras.layers.Dense(1)(pooled))


if __name__ == "__main__":
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = build_model()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    history = model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0,
                        callbacks=[NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))])
    non_finite = model.stop_training or not np.all(np.isfinite(history.history.get("loss", [])))
    print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
    sys.exit(1 if non_finite else 0)
