"""A price regression with a hand-written log-scale loss (squared error of log(1 + price)). The CSV marks an unknown
price as -1, a convention of the system it was exported from; for that record log(1 + y) is log(0) = -inf.
The Log reads y + 1, not y itself, so the dump's counts cannot name the record; its row can.
Fix: drop the rows whose price is -1 where the CSV is read."""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

keras.utils.set_random_seed(3)
rng = np.random.default_rng(3)
features = rng.normal(size=(640, 6)).astype("float32")
prices = np.exp(4.0 + features[:, :1] * 0.5 + rng.normal(scale=0.1, size=(640, 1))).astype("float32")
prices[337] = -1.0  # unknown price, as the export marks it


def log_scale_error(y_true, y_pred):
    error = tf.math.log(y_true + 1.0) - tf.math.log(tf.nn.relu(y_pred) + 1.0)  # ORIGIN
    return tf.reduce_mean(tf.square(error))


model = keras.Sequential(
    [keras.Input((6,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
)
model.compile(keras.optimizers.Adam(1e-3), loss=log_scale_error)
model.fit(
    features, prices, batch_size=32, epochs=2, shuffle=False, callbacks=[NanGuard("captures")], verbose=0
)
