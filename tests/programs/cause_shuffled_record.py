"""A regression script trained at module level with fit's defaults (shuffle=True) and a validation split; its
loss is a squared log error written by hand, and one target, row 413 of y, is -1 (an export's "missing").
The batch that fails holds that row somewhere in the epoch's shuffled order; the cause must name index 413."""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

keras.utils.set_random_seed(3)
rng = np.random.default_rng(3)
x = rng.normal(size=(1000, 8)).astype("float32")
y = np.exp(x[:, :1] * 0.5).astype("float32")
y[413, 0] = -1.0  # BAD RECORD


def msle(y_true, y_pred):
    return tf.reduce_mean(tf.square(tf.math.log(y_pred + 1.0) - tf.math.log(y_true + 1.0)))  # ORIGIN


model = keras.Sequential(
    [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1, activation="softplus")]
)
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=msle)
model.fit(x, y, batch_size=32, epochs=2, validation_split=0.2, callbacks=[NanGuard("captures")], verbose=0)
