"""Temperature windows (readings around 15-35 C, a spread of 0.5) normalised per window by a custom layer under
mixed_float16. The layer computes the variance in one pass, mean(x^2) - mean(x)^2: the squares are about 900,
which float16 holds 0.5 apart, so the 0.25 variance is lost and comes out negative in some windows; rsqrt of it is
NaN. In float32 the same layer is fine."""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)


class WindowNorm(keras.layers.Layer):
    def call(self, x):
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        var = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True) - tf.square(mean)  # CHANGE
        return (x - mean) * tf.math.rsqrt(var + 1e-3)


rng = np.random.default_rng(0)
base = rng.uniform(15.0, 35.0, size=(256, 1))
windows = (base + rng.normal(scale=0.5, size=(256, 32))).astype("float32")
targets = (windows[:, -1:] - windows[:, :1]).astype("float32")

model = keras.Sequential([keras.Input(shape=(32,)), WindowNorm(), keras.layers.Dense(1, dtype="float32")])
model.compile(optimizer="adam", loss="mse")
model.fit(windows, targets, batch_size=64, epochs=2, verbose=0, callbacks=[NanGuard("captures")])
