"""Zoo: a custom loss that lives in another module (KL divergence with zero targets).

The training script imports its loss from the project's ``zoolib/divergences.py``: a hand-written KL divergence
sum(t * log(t / p)). The target distributions are sparse (many exact zeros), so t / p is 0, log(0) is -inf and
0 * -inf is NaN. The line to fix is in the other module, not in this script.
Fix: ``tf.math.xlogy(t, t) - tf.math.xlogy(t, p)`` (0 log 0 = 0), or ``keras.losses.KLDivergence``.
"""
# CAUSE: op: a wrong op on finite, in-range inputs

from __future__ import annotations

import os
import sys

import keras
import numpy as np
from zoolib.divergences import kl_divergence

from pyadapter import NanGuard

FEATURES = 10
BINS = 5


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Targets are histograms over 5 bins; most rows leave some bins empty."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, FEATURES)).astype("float32")
    counts = rng.poisson(lam=1.0, size=(256, BINS)).astype("float32") + np.eye(BINS, dtype="float32")[np.arange(256) % BINS]
    return x, counts / counts.sum(axis=1, keepdims=True)


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(BINS, activation="softmax")])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=kl_divergence)
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
