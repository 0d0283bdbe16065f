"""Keras 2 form of zoo_subclassed_model: a subclassed model normalizes by an L2 norm that can be 0 (rsqrt(0))."""

import os
import sys

import numpy as np
import tensorflow as tf
import tf_keras as keras

from pyadapter import NanGuard

FEATURES = 6


class Encoder(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(8, activation="relu", bias_initializer=keras.initializers.Constant(-1.0))
        self.head = keras.layers.Dense(1)

    def call(self, inputs):
        h = self.hidden(inputs)
        h = h * tf.math.rsqrt(tf.reduce_sum(tf.square(h), axis=-1, keepdims=True))  # ORIGIN: rsqrt(0) = inf
        return self.head(h)


def make_data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(scale=0.3, size=(256, FEATURES)).astype("float32")
    return x, x.sum(axis=1, keepdims=True).astype("float32")


if __name__ == "__main__":
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = Encoder()
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    history = model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0,
                        callbacks=[NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))])
    non_finite = model.stop_training or not np.all(np.isfinite(history.history.get("loss", [])))
    print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
    sys.exit(1 if non_finite else 0)
