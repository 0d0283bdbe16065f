"""Keras fit with a custom standardization layer; one input column is constant, so its std is 0."""

import keras
import numpy as np
import tensorflow as tf


class Standardize(keras.layers.Layer):
    def call(self, x):
        mean = tf.reduce_mean(x, axis=0, keepdims=True)
        std = tf.math.reduce_std(x, axis=0, keepdims=True)
        return (x - mean) / std  # ORIGIN


rng = np.random.default_rng(0)
features = rng.normal(size=(32, 4)).astype("float32")
features[:, 2] = 1.0
targets = rng.normal(size=(32, 1)).astype("float32")
model = keras.Sequential([keras.Input((4,)), Standardize(), keras.layers.Dense(1)])
# XLA would fail under tfdbg (no DebugNumericSummaryV2 kernel): `nanlens run` must switch it off.
model.compile(optimizer="sgd", loss="mse", jit_compile=True)
model.fit(features, targets, batch_size=16, epochs=1, shuffle=False, verbose=0)
