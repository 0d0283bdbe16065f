"""A house-price regression as a user writes it: trains at module level, with a hand-written log error for its
loss. One listing in the data has a price of 0 (a missing price stored as 0): log(0) = -inf in the loss. The dump
has no health for the step's arguments (y_true is one), so `nanlens locate` must find the 0 in the batch."""

import os

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

rng = np.random.default_rng(7)
features = rng.uniform(0.0, 1.0, (512, 6)).astype("float32")
prices = (50.0 + 400.0 * features[:, :2].sum(axis=1, keepdims=True)).astype("float32")
prices[77] = 0.0  # a missing price, stored as 0


def log_error(y_true, y_pred):
    return tf.reduce_mean(tf.square(tf.math.log(y_true) - tf.math.log(y_pred)))  # ORIGIN


model = keras.Sequential(
    [keras.Input((6,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1, activation="softplus")]
)
model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=log_error)
model.fit(
    features,
    prices,
    batch_size=32,
    epochs=2,
    shuffle=False,
    verbose=0,
    callbacks=[NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))],
)
