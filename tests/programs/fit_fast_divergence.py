"""A regression net trained by ``model.fit`` with plain SGD at learning rate 1.0 on unscaled features (values from
100 to 1000) and targets in the thousands: the first update is far larger than the weights and a MatMul overflows
float32 two steps in, too fast for a geometric trend to build in the history. Every op is correct. Used by
tests/test_cause_programs.py: the cause must be ``divergence`` and the line to change the optimizer's construction
(the line marked ``# CHANGE``).

Usage: fit_fast_divergence.py CAPTURE_DIR
"""

from __future__ import annotations

import sys

import keras
import numpy as np

from pyadapter import NanGuard


def make_data(n: int = 1024, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(100.0, 1000.0, size=(n, 8)).astype("float32")  # unscaled features
    y = (x @ rng.uniform(1.0, 5.0, size=(8, 1)) + 50.0).astype("float32")
    return x, y


def main(capture_dir: str) -> int:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(learning_rate=1.0)  # CHANGE
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(x, y, batch_size=32, epochs=5, verbose=0, callbacks=[NanGuard(capture_dir)])
    print("stopped by NanGuard" if model.stop_training else "training stayed finite")
    return 0 if model.stop_training else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
