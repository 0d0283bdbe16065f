"""Zoo: SGD with momentum 0.9 and a learning rate too high for a small regression net.

A small MLP predicts a room's temperature (about 20 degrees C) from eight standardized sensor readings. The
features are scaled properly and every op is correct, but ``SGD(learning_rate=0.03, momentum=0.9)`` takes steps
about ten times its learning rate once the momentum builds up: after a few steps each update overshoots further,
the loss grows by orders of magnitude per step and a layer's outputs overflow float32 about ten steps in.
Fix: a lower learning rate (0.01 trains fine here), ``clipnorm=1.0``, or a warm-up.
"""
# CAUSE: divergence: every op is right; the learning rate is too high for momentum 0.9

from __future__ import annotations

import os
import sys

import keras
import numpy as np

from pyadapter import NanGuard

FEATURES = 8


def make_data(n: int = 2048, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES)).astype("float32")  # already standardized
    w = rng.uniform(0.5, 2.0, size=(FEATURES, 1))
    y = 20.0 + x @ w + 0.5 * x[:, :1] * x[:, 1:2] + rng.normal(0.0, 0.5, size=(n, 1))  # degrees C
    return x, y.astype("float32")


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential(
        [
            keras.Input(shape=(FEATURES,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    optimizer = keras.optimizers.SGD(learning_rate=0.03, momentum=0.9)  # ORIGIN: too high a learning rate for momentum 0.9
    model.compile(optimizer=optimizer, loss="mse")
    guard = NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))
    history = model.fit(x, y, batch_size=32, epochs=3, verbose=0, callbacks=[guard])
    return model, history


if __name__ == "__main__":
    model, history = main()
    losses = history.history.get("loss", [])
    weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
    non_finite = bool(model.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
    print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
    sys.exit(1 if non_finite else 0)
