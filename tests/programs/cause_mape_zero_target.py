"""A course-style sales forecaster with a mean absolute percentage error written by hand, ``|(y_true - y_pred) /
y_true|``: the store is closed on some days and sells 0, and the batch holding such a day makes the loss inf. Used
by tests/test_cause_programs.py: the record (a sale of 0) is valid data, so the cause is not "correct it or leave
it out"; the loss's division (marked ``# CHANGE``) is what to change.
"""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

keras.utils.set_random_seed(4)
rng = np.random.default_rng(4)
days = 640
sales = 80.0 + 20.0 * np.sin(np.arange(days) * 2 * np.pi / 7) + rng.normal(0.0, 5.0, days)
sales[rng.choice(days, 6, replace=False)] = 0.0  # closed days
window = 14
x = np.stack([sales[i : i + window] for i in range(days - window)]).astype("float32") / 100.0
y = sales[window:].astype("float32")


def mape(y_true, y_pred):
    y_true = tf.reshape(y_true, [-1])
    y_pred = tf.reshape(y_pred, [-1])
    return 100.0 * tf.reduce_mean(tf.abs((y_true - y_pred) / y_true))  # CHANGE


model = keras.Sequential([keras.Input((window,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=mape)
model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[NanGuard("captures")])
