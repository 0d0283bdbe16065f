"""Zoo: raw features up to the hundreds fed to a net without normalization (sane hyperparameters).

A house-price regression in the style of the Keras regression tutorial, but the ``Normalization`` layer was left
out: living area (40-250 m^2), age (0-100 years), distance to the centre (km) and rooms go into the first
``Dense`` layer as they are. ``compile(optimizer="sgd")`` uses Keras's defaults (learning rate 0.01), which are
fine for standardized inputs; on inputs this large (an area's square is about 2 * 10^4) every SGD step
overshoots, the loss grows by orders of magnitude per step and the activations overflow float32. Every op is
correct and the learning rate is the usual one; the missing normalization is the bug.
Fix: add ``keras.layers.Normalization()`` adapted to the training features as the model's first layer.
"""
# CAUSE: divergence: every op is right; unnormalized inputs make the default SGD step overshoot

from __future__ import annotations

import os
import sys

import keras
import numpy as np

from pyadapter import NanGuard


def load_houses(n: int = 1500, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    area = rng.uniform(40.0, 250.0, n)  # m^2
    age = rng.uniform(0.0, 100.0, n)  # years
    distance = rng.uniform(0.2, 15.0, n)  # km to the centre
    rooms = rng.integers(1, 8, n).astype("float64")
    price = 0.03 * area - 0.01 * age - 0.1 * distance + 0.1 * rooms  # in 100k
    x = np.stack([area, age, distance, rooms], axis=1).astype("float32")
    return x, (price + rng.normal(0.0, 0.2, n)).astype("float32")


x, y = load_houses()
keras.utils.set_random_seed(0)
model = keras.Sequential(
    [
        keras.Input(shape=(4,)),  # ORIGIN: raw features go straight in; add a Normalization layer adapted to x here
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(1),
    ]
)
model.compile(optimizer="sgd", loss="mse")
history = model.fit(
    x, y, batch_size=32, epochs=3, validation_split=0.2, verbose=0,
    callbacks=[NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))],
)

losses = history.history.get("loss", [])
weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
non_finite = bool(model.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
sys.exit(1 if non_finite else 0)
