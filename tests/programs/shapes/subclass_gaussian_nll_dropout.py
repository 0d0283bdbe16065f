"""Heteroscedastic regression (Nix & Weigend / Kendall & Gal style), written by a helper trying NaN Lens as a user:
a keras.Model subclass with constructor arguments and its own train_step. Keras 3's automatic get_config records
its dropout=0.1 as 0.0, so the model.keras NanGuard saves rebuilds a model without the Dropout's seed variable; the
replay from it ran on fresh weights. The scale head is a ReLU: a sigma of 0 makes log(sigma) -inf at step 0."""
import math

import keras
import numpy as np
import tensorflow as tf
from keras import layers

from pyadapter import NanGuard


class GaussianRegressor(keras.Model):
    def __init__(self, hidden_units=(64, 64), dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.hidden = [layers.Dense(u, activation="relu") for u in hidden_units]
        self.drop = layers.Dropout(dropout)
        self.mu_head = layers.Dense(1, name="mu")
        self.sigma_head = layers.Dense(1, activation="relu", name="sigma")
        self.nll_tracker = keras.metrics.Mean(name="nll")
        self.mae_tracker = keras.metrics.MeanAbsoluteError(name="mae")

    def call(self, x, training=False):
        h = x
        for layer in self.hidden:
            h = layer(h)
        h = self.drop(h, training=training)
        return self.mu_head(h), self.sigma_head(h)

    @property
    def metrics(self):
        return [self.nll_tracker, self.mae_tracker]

    @staticmethod
    def gaussian_nll(y, mu, sigma):
        return tf.reduce_mean(
            tf.math.log(sigma) + 0.5 * tf.square((y - mu) / sigma) + 0.5 * math.log(2 * math.pi)  # ORIGIN
        )

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            mu, sigma = self(x, training=True)
            loss = self.gaussian_nll(y, mu, sigma)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.nll_tracker.update_state(loss)
        self.mae_tracker.update_state(y, mu)
        return {m.name: m.result() for m in self.metrics}

    def test_step(self, data):
        x, y = data
        mu, sigma = self(x, training=False)
        self.nll_tracker.update_state(self.gaussian_nll(y, mu, sigma))
        self.mae_tracker.update_state(y, mu)
        return {m.name: m.result() for m in self.metrics}


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype("float32")          # 8 standardized features
    w = rng.normal(size=(8, 1))
    noise_sd = 0.2 + 0.5 * np.abs(x[:, :1])                 # noise grows with feature 0
    y = (np.sin(x @ w) * 3 + x[:, 1:2] + rng.normal(size=(n, 1)) * noise_sd).astype("float32")
    return x, y


if __name__ == "__main__":
    x_train, y_train = make_data(4000)
    x_val, y_val = make_data(500, seed=1)

    model = GaussianRegressor(hidden_units=(64, 64), dropout=0.1)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3))
    model.fit(
        x_train, y_train,
        validation_data=(x_val, y_val),
        batch_size=64, epochs=20,
        callbacks=[NanGuard("captures")],
        verbose=2,
    )
