"""A sequence classifier: a custom layer takes the log of the sensor readings, an LSTM reads the sequence. One
sequence holds a zero reading, and log(0) is -inf. The LSTM's while loop reads its inputs through a TensorList whose
traces come before the Log's in the dump, with no health of its input (a variant): the scan named the LSTM line."""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

keras.utils.set_random_seed(0)


class LogFeature(keras.layers.Layer):
    def call(self, x):
        return tf.math.log(x)  # ORIGIN


x = np.random.default_rng(0).uniform(0.5, 2.0, (32, 5, 3)).astype("float32")
x[20, :, 0] = 0.0
y = np.random.default_rng(1).integers(0, 2, 32)
inputs = keras.Input((5, 3))
h = LogFeature()(inputs)
h = keras.layers.LSTM(4)(h)
model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(h))
model.compile("adam", "binary_crossentropy")
model.fit(x, y, batch_size=8, epochs=1, shuffle=False, callbacks=[NanGuard("captures")], verbose=0)
