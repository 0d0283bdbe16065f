"""Zoo: an exploding learning rate (every op correct, the hyperparameter wrong).

Linear regression on unscaled features (values in the tens) with plain SGD at learning rate 0.05. Every step
overshoots further: the weights grow geometrically and overflow float32 to inf within a few dozen steps, after
which inf - inf gives NaN. Every op is correct; the hyperparameter is the bug.
Fix: a smaller learning rate (1e-4 here), standardized features, or gradient clipping.
"""
# CAUSE: divergence: every op is right; the learning rate makes the weights grow until they overflow

from __future__ import annotations

import os
import sys

import keras
import numpy as np

from pyadapter import NanGuard

FEATURES = 4


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(10.0, 30.0, size=(512, FEATURES)).astype("float32")
    y = (x @ np.array([[0.5], [-1.0], [2.0], [0.3]], dtype="float32") + 3.0).astype("float32")
    return x, y


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05), loss="mse")  # ORIGIN: learning rate far too high for unscaled features
    guard = NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))
    history = model.fit(x, y, batch_size=32, epochs=5, shuffle=False, verbose=0, callbacks=[guard])
    return model, history


if __name__ == "__main__":
    model, history = main()
    losses = history.history.get("loss", [])
    weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
    non_finite = bool(model.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
    print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
    sys.exit(1 if non_finite else 0)
