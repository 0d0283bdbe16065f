"""Keras 2 form of zoo_mixed_precision_softmax_overflow: mixed_float16 (compile wraps Adam in tf_keras's
LossScaleOptimizer), a hand-written softmax in a custom layer overflows float16. Training at module level."""

import os
import sys

import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

TIME_STEPS = 12
FEATURES = 8


class AttentionPooling(tf.keras.layers.Layer):
    def build(self, input_shape):
        self.query = self.add_weight(shape=(input_shape[-1], 1), initializer="glorot_uniform", name="query")

    def call(self, inputs):
        scores = tf.matmul(inputs, self.query)
        weights = tf.exp(scores)  # ORIGIN: exp overflows float16 (max 65504) once a score passes ~11.1
        weights = weights / tf.reduce_sum(weights, axis=1, keepdims=True)
        return tf.reduce_sum(weights * inputs, axis=1)


def make_data(n=512, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, TIME_STEPS, FEATURES)).astype("float32")
    marked = rng.integers(0, TIME_STEPS, size=n)
    x[np.arange(n), marked, -1] = 4.0
    y = x[np.arange(n), marked, :1] * 3.0
    return x, y.astype("float32")


tf.keras.mixed_precision.set_global_policy("mixed_float16")
tf.keras.utils.set_random_seed(0)
x, y = make_data()
model = tf.keras.Sequential([
    tf.keras.layers.Dense(16, activation="relu", input_shape=(TIME_STEPS, FEATURES)),
    AttentionPooling(),
    tf.keras.layers.Dense(1, dtype="float32"),
])
model.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss="mse")  # 0.02 stays finite in tf_keras
history = model.fit(x, y, batch_size=32, epochs=10, shuffle=False, verbose=0,
                    callbacks=[NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))])
non_finite = model.stop_training or not np.all(np.isfinite(history.history.get("loss", [])))
print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
sys.exit(1 if non_finite else 0)
