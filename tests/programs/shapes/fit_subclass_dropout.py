"""A keras.Model subclass whose call() has training= branches (Dropout, BatchNormalization), trained with fit.

The head turns the dropped-out features into proportions by dividing by their sum. When dropout drops every
feature of a sample, the sum is 0 and 0 / 0 = NaN; which samples that hits depends on the dropout mask.
Fix: divide by (sum + eps), or normalize before the dropout.
"""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard


class MixtureNet(keras.Model):
    def __init__(self, hidden=8, rate=0.5):
        super().__init__()
        self.dense = keras.layers.Dense(hidden, activation="softplus")
        self.bn = keras.layers.BatchNormalization()
        self.dropout = keras.layers.Dropout(rate)
        self.out = keras.layers.Dense(1)

    def call(self, inputs, training=False):
        h = self.dense(inputs)
        h = self.bn(h, training=training)
        h = tf.nn.softplus(h)
        if training:
            h = self.dropout(h, training=training)
        proportions = h / tf.reduce_sum(h, axis=-1, keepdims=True)  # ORIGIN
        return self.out(proportions)


keras.utils.set_random_seed(2)
rng = np.random.default_rng(2)
x = rng.normal(size=(512, 8)).astype("float32")
y = rng.normal(size=(512, 1)).astype("float32")

model = MixtureNet(hidden=8, rate=0.5)
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[NanGuard("captures")])
