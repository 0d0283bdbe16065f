"""Keras 2 form of zoo_train_step_override: a train_step written the TF 2.x way (compiled_loss,
apply_gradients) normalizes every gradient by its norm; an all-padding batch gives 0 / 0."""

import os
import sys

import numpy as np
import tensorflow as tf
from tensorflow import keras

from pyadapter import NanGuard

FEATURES = 6


class NormalizedGradientModel(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compiled_loss(y, y_pred, regularization_losses=self.losses)
        grads = tape.gradient(loss, self.trainable_variables)
        grads = [g / tf.norm(g) for g in grads]  # ORIGIN: a zero gradient gives 0 / 0 = NaN
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.compiled_metrics.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


def make_data(seed=0):
    rng = np.random.default_rng(seed)
    x = np.zeros((256, FEATURES), dtype="float32")
    y = np.zeros((256, 1), dtype="float32")
    x[:180] = rng.normal(size=(180, FEATURES))
    y[:180] = x[:180, :1] * 2.0 - 1.0
    return x, y


if __name__ == "__main__":
    keras.utils.set_random_seed(0)
    x, y = make_data()
    inputs = keras.Input(shape=(FEATURES,))
    outputs = keras.layers.Dense(1)(keras.layers.Dense(8, activation="tanh")(inputs))
    model = NormalizedGradientModel(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(1e-2), loss="mse")
    history = model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0,
                        callbacks=[NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))])
    non_finite = model.stop_training or not np.all(np.isfinite(history.history.get("loss", [])))
    print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
    sys.exit(1 if non_finite else 0)
