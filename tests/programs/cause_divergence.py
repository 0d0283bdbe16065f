"""A regression net whose run diverges: SGD with momentum 0.9 and a learning rate far too high for its unscaled
features (values up to 40). Every op is correct; the loss grows geometrically until a MatMul overflows
float32. Used by tests/test_cause_programs.py: the cause must be ``divergence`` and the line to change the
optimizer's construction (the line marked ``# CHANGE``).

Usage: cause_divergence.py CAPTURE_DIR
"""

from __future__ import annotations

import sys

import keras
import numpy as np

from pyadapter import NanGuard


def make_data(n: int = 1024, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(5.0, 40.0, size=(n, 6)).astype("float32")  # unscaled features
    y = (x @ rng.normal(size=(6, 1)) + 10.0).astype("float32")
    return x, y


def main(capture_dir: str) -> int:
    keras.utils.set_random_seed(0)
    x, y = make_data()
    model = keras.Sequential([keras.Input(shape=(6,)), keras.layers.Dense(16), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(learning_rate=7e-5, momentum=0.9)  # CHANGE
    model.compile(optimizer=optimizer, loss="mse", jit_compile=False)
    model.fit(x, y, batch_size=32, epochs=20, shuffle=False, verbose=0, callbacks=[NanGuard(capture_dir)])
    print("stopped by NanGuard" if model.stop_training else "training stayed finite")
    return 0 if model.stop_training else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
