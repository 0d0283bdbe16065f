"""A sequence model with its own RNN cell, a running total kept in log space, trained with fit. One recording has
a sensor glitch: negative readings from time step 5 on, so that record's total goes below 0 and the log is NaN.
The Log runs inside the RNN's while loop, once per time step; only its runs from step 5 on, and only in that
record's row, hold NaN.
Fix: drop (or repair) the recordings with negative readings where the data is read."""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

keras.utils.set_random_seed(0)


class LogTotalCell(keras.layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.state_size = units

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), name="kernel")

    def call(self, inputs, states):
        total = states[0] + tf.matmul(inputs, tf.abs(self.kernel))
        return tf.math.log(total), [total]  # ORIGIN


readings = np.abs(np.random.default_rng(0).normal(size=(256, 12, 4))).astype("float32")
readings[100, 5:] = -3.0  # the glitch
targets = np.random.default_rng(1).normal(size=(256, 1)).astype("float32")
model = keras.Sequential([keras.Input((12, 4)), keras.layers.RNN(LogTotalCell(8)), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(readings, targets, batch_size=32, epochs=1, shuffle=False, callbacks=[NanGuard("captures")], verbose=0)
