"""Zoo: an attention mask built with -inf (0 * -inf in a custom layer).

A self-attention layer masks padded positions by adding (1 - mask) * -inf to the scores. For real positions
(mask = 1) that is 0 * -inf = NaN, so every score row becomes NaN in the very first step.
Fix: use a large finite negative number (-1e9) or ``tf.where(mask > 0, scores, -1e9)``.
"""
# CAUSE: op: a wrong op on finite, in-range inputs

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

STEPS = 6
DIM = 8


class MaskedSelfAttention(keras.layers.Layer):
    """Inputs are (batch, steps, DIM + 1); the last channel is 1 for real positions and 0 for padding."""

    def build(self, input_shape: tuple[int, ...]) -> None:
        self.query = keras.layers.Dense(DIM)
        self.key = keras.layers.Dense(DIM)

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        values, mask = inputs[..., :DIM], inputs[..., DIM]
        scores = tf.matmul(self.query(values), self.key(values), transpose_b=True) / np.sqrt(DIM)
        scores = scores + (1.0 - mask[:, None, :]) * -np.inf  # ORIGIN: 0 * -inf = NaN where mask is 1; use -1e9
        return tf.matmul(tf.nn.softmax(scores, axis=-1), values)


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(128, STEPS, DIM)).astype("float32")
    lengths = rng.integers(2, STEPS + 1, size=128)
    mask = (np.arange(STEPS)[None, :] < lengths[:, None]).astype("float32")
    x = np.concatenate([values * mask[..., None], mask[..., None]], axis=-1)
    return x, (values[:, 0, :1] > 0).astype("float32")


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential(
        [
            keras.Input(shape=(STEPS, DIM + 1)),
            MaskedSelfAttention(),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy")
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
