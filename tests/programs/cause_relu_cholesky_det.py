"""A 2-D position with a full covariance (heteroscedastic regression) in a keras.Model subclass with constructor
arguments and its own train_step, the covariance's inverse written out for 2x2. The Cholesky factor's diagonal
comes from a ReLU head: exactly 0 for some rows, so det(Sigma) is 0 there."""

import keras
import numpy as np
import tensorflow as tf
from keras import layers

from pyadapter import NanGuard


def inverse_2x2(a, b, c, d):
    det = a * d - b * c
    return det, tf.stack([tf.stack([d, -b], -1), tf.stack([-c, a], -1)], -2) / det[..., None, None]  # DIVIDE


class CovarianceRegressor(keras.Model):
    def __init__(self, hidden=32, **kwargs):
        super().__init__(**kwargs)
        self.body = layers.Dense(hidden, activation="relu")
        self.mean_head = layers.Dense(2)
        self.diag_head = layers.Dense(2, activation="relu")  # RELU
        self.offdiag_head = layers.Dense(1)
        self.nll_tracker = keras.metrics.Mean(name="nll")

    def call(self, x):
        h = self.body(x)
        return self.mean_head(h), self.diag_head(h), self.offdiag_head(h)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            mean, diag, offdiag = self(x, training=True)
            l11, l22, l21 = diag[:, 0], diag[:, 1], offdiag[:, 0]
            det, inv = inverse_2x2(l11 * l11, l11 * l21, l11 * l21, l21 * l21 + l22 * l22)
            r = (y - mean)[..., None]
            maha = tf.squeeze(tf.matmul(tf.matmul(r, inv, transpose_a=True), r), [-1, -2])
            loss = tf.reduce_mean(0.5 * maha + 0.5 * tf.math.log(det))
        grads = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        self.nll_tracker.update_state(loss)
        return {"nll": self.nll_tracker.result()}


keras.utils.set_random_seed(7)
rng = np.random.default_rng(3)
x = rng.uniform(-1, 1, size=(512, 4)).astype("float32")
y = (x[:, :2] + 0.1 * rng.normal(size=(512, 2))).astype("float32")
model = CovarianceRegressor(hidden=32)
model.compile(optimizer=keras.optimizers.Adam(1e-3))
model.fit(x, y, batch_size=128, epochs=2, verbose=0, callbacks=[NanGuard("captures")])
