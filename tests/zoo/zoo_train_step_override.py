"""Zoo: a Keras model that overrides train_step (a zero gradient divided by its norm).

The custom ``train_step`` normalizes each gradient by its own norm ("normalized gradient descent"). The data set
is padded with all-zero rows to a fixed 256 rows (static shapes); on an all-padding batch the first layer's kernel
gradient is exactly 0, and 0 / norm(0) = 0 / 0 = NaN.
Fix: divide by ``tf.norm(g) + epsilon`` (or ``tf.math.divide_no_nan``), or drop padding rows.
"""
# CAUSE: op: a wrong op on finite, in-range inputs

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

FEATURES = 6


class NormalizedGradientModel(keras.Model):
    def train_step(self, data: tuple[tf.Tensor, tf.Tensor]) -> dict[str, tf.Tensor]:
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
        grads = tape.gradient(loss, self.trainable_variables)
        grads = [g / tf.norm(g) for g in grads]  # ORIGIN: a zero gradient gives 0 / 0 = NaN
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """180 real rows padded with zeros to a fixed 256 rows (8 batches of 32; the last two are all padding)."""
    rng = np.random.default_rng(seed)
    x = np.zeros((256, FEATURES), dtype="float32")
    y = np.zeros((256, 1), dtype="float32")
    x[:180] = rng.normal(size=(180, FEATURES))
    y[:180] = x[:180, :1] * 2.0 - 1.0
    return x, y


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    inputs = keras.Input(shape=(FEATURES,))
    outputs = keras.layers.Dense(1)(keras.layers.Dense(8, activation="tanh")(inputs))
    model = NormalizedGradientModel(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(1e-2), loss="mse")
    guard = NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))
    history = model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0, callbacks=[guard])
    return model, history


if __name__ == "__main__":
    model, history = main()
    losses = history.history.get("loss", [])
    weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
    non_finite = bool(model.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
    print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
    sys.exit(1 if non_finite else 0)
