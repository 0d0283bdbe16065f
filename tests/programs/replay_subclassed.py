"""A subclassed Keras model with no get_config: Keras cannot rebuild it from model.keras, so replay builds
`ScaledRegressor()` anew from this script and sets the captured weights. Its normalization divides by a
standard deviation that is 0 for the constant 3rd batch.

Run: python replay_subclassed.py CAPTURE_DIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard


class ScaledRegressor(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(4, activation="tanh")
        self.out = keras.layers.Dense(1)

    def call(self, inputs):
        centered = inputs - tf.reduce_mean(inputs, axis=0)
        scaled = centered / tf.math.reduce_std(inputs, axis=0)  # ORIGIN
        return self.out(self.hidden(scaled))


def make_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    x = rng.normal(size=(48, 3)).astype("float32")
    x[32:] = 1.0  # the 3rd batch of 16 is constant: its standard deviation is 0
    return x, rng.normal(size=(48, 1)).astype("float32")


if __name__ == "__main__":
    keras.utils.set_random_seed(0)
    model = ScaledRegressor()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse", jit_compile=False)
    x, y = make_data()
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[NanGuard(sys.argv[1])])
