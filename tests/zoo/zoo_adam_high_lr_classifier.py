"""Zoo: Adam with a learning rate far too high for a small sequence classifier.

A one-layer ReLU recurrent net (``SimpleRNN(32, activation="relu")``) reads 40 daily readings and says whether
the machine failed that month. ``Adam(learning_rate=0.3)`` (an SGD-sized learning rate given to Adam) moves every
weight by about the learning rate on its first steps, whatever the gradient's size. The recurrent matrix's largest
eigenvalue goes far past 1, the hidden state is multiplied by it at each of the 40 time steps, the loss jumps
from 0.9 to about 10^19 within two steps and the updates overflow float32. Every op is correct; the
hyperparameter is the bug.
Fix: ``Adam(learning_rate=1e-3)`` (the default; it trains fine here), or ``clipnorm=1.0``.
"""
# CAUSE: divergence: every op is right; the learning rate is far too high for Adam

from __future__ import annotations

import os
import sys

import keras
import numpy as np

from pyadapter import NanGuard

TIME_STEPS = 40
CHANNELS = 3


def make_data(n: int = 1024, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, TIME_STEPS, CHANNELS)).astype("float32")
    drift = rng.random(n) < 0.3
    x[drift, :, 0] += np.linspace(0.0, 2.0, TIME_STEPS, dtype="float32")  # a failing machine drifts
    return x, drift.astype("int32")


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential(
        [
            keras.Input(shape=(TIME_STEPS, CHANNELS)),
            keras.layers.SimpleRNN(32, activation="relu"),
            keras.layers.Dense(2),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=0.3),  # ORIGIN: 300 times Adam's default learning rate
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
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
