"""A `keras.Model` subclass as people write them: hyperparameters in the constructor, layers made there, no
`build()` or `get_config()`, its own `train_step`, trained at module level. Its per-feature standardization
divides by a standard deviation that is 0 for a constant batch.

Run: python replay_subclass_args.py CAPTURE_DIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard


class Regressor(keras.Model):
    def __init__(self, hidden_units, dropout_rate, **kwargs):
        super().__init__(**kwargs)
        self.hidden = [keras.layers.Dense(u, activation="relu") for u in hidden_units]
        self.drop = keras.layers.Dropout(dropout_rate)
        self.head = keras.layers.Dense(1)

    def call(self, x, training=False):
        x = (x - tf.reduce_mean(x, axis=0)) / tf.math.reduce_std(x, axis=0)  # ORIGIN
        for layer in self.hidden:
            x = self.drop(layer(x), training=training)
        return self.head(x)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(x, training=True) - y))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


keras.utils.set_random_seed(3)
rng = np.random.default_rng(3)
features = rng.normal(size=(96, 5)).astype("float32")
features[64:80] = 2.0  # one constant batch
targets = rng.normal(size=(96, 1)).astype("float32")
model = Regressor(hidden_units=(16, 8), dropout_rate=0.25)
model.compile(optimizer=keras.optimizers.RMSprop(1e-3))
model.fit(features, targets, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[NanGuard(sys.argv[1])])
