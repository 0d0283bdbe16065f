"""Zoo: a custom Keras layer with weights (log1p of negative inputs).

``LogCompress`` applies log1p(scale * x) to squash heavy-tailed features, with a learned per-feature scale. It
was written for non-negative counts but is used after a Dense layer with no activation: log1p of anything below
-1 is NaN.
Fix: feed it non-negative inputs (a relu/softplus before it) or use sign(x) * log1p(|x|).
"""
# CAUSE: op: a wrong op on finite, in-range inputs

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

FEATURES = 8


class LogCompress(keras.layers.Layer):
    def build(self, input_shape: tuple[int, ...]) -> None:
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="scale")

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        return tf.math.log1p(self.scale * inputs)  # ORIGIN: log1p(v) is NaN for v < -1; the inputs can be negative


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(scale=2.0, size=(256, FEATURES)).astype("float32")
    return x, (x[:, :1] > 0).astype("float32")


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential(
        [keras.Input(shape=(FEATURES,)), keras.layers.Dense(16), LogCompress(), keras.layers.Dense(1, activation="sigmoid")]
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
