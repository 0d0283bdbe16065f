"""Keras fit with a custom layer whose log of a softmax underflows to -inf on the 4th batch.

Run: python replay_keras_layer.py CAPTURE_DIR  (NanGuard writes a bundle there and stops training).
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard


@keras.saving.register_keras_serializable(package="nanlens_tests")
class LogSoftmaxHead(keras.layers.Layer):
    """log(softmax(logits)) done the naive way: softmax underflows to 0 for huge logits."""

    def call(self, logits):
        probs = tf.nn.softmax(logits)
        return tf.math.log(probs)  # ORIGIN


def nll(y_true, log_probs):
    return -tf.reduce_sum(y_true * log_probs, axis=-1)


def build_model() -> keras.Model:
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    logits = keras.layers.Dense(3)(hidden)
    model = keras.Model(inputs, LogSoftmaxHead()(logits))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=nll, jit_compile=False)
    return model


def make_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    x[48:] *= 1e4  # the 4th batch of 16 blows the logits up
    y = keras.utils.to_categorical(rng.integers(0, 3, 64), 3).astype("float32")
    return x, y


if __name__ == "__main__":
    keras.utils.set_random_seed(0)
    model = build_model()
    x, y = make_data()
    model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[NanGuard(sys.argv[1])])
