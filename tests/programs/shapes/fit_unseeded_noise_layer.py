"""Keras 3 functional model whose own augmentation layer adds Gaussian noise with ``keras.random.normal(shape)``,
no seed given: Keras draws it from its global SeedGenerator. A log transform follows the noise.

The prices are at least 1, so their log is fine, until the noise pushes a price below 0 (about 1 step in 60);
which step that hits depends on the noise drawn. Fix: take the log first and add the noise to the log prices.
"""

import keras
import numpy as np
from keras import layers, ops

from pyadapter import NanGuard


class PriceJitter(layers.Layer):
    """Augmentation: jitter the raw prices while training."""

    def __init__(self, stddev, **kwargs):
        super().__init__(**kwargs)
        self.stddev = stddev

    def call(self, prices, training=None):
        if training:
            return prices + keras.random.normal(ops.shape(prices), stddev=self.stddev)
        return prices

    def get_config(self):
        return {**super().get_config(), "stddev": self.stddev}


keras.utils.set_random_seed(2)
rng = np.random.default_rng(2)
prices = rng.uniform(1.0, 1.5, size=(4096, 8)).astype("float32")
target = np.log(prices).mean(axis=1, keepdims=True) + rng.normal(0, 0.01, size=(4096, 1)).astype("float32")

inputs = keras.Input(shape=(8,))
jittered = PriceJitter(0.3)(inputs)
log_prices = layers.Lambda(ops.log)(jittered)  # ORIGIN
hidden = layers.Dense(16, activation="relu")(log_prices)
outputs = layers.Dense(1)(hidden)
model = keras.Model(inputs, outputs)

model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
model.fit(prices, target, batch_size=32, epochs=3, verbose=0, callbacks=[NanGuard("captures")])
