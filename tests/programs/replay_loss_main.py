"""Keras fit whose loss lives in another module (replay_loss_lib): the sigmoid saturates to exactly 1.0 on
the 3rd batch, so log(1 - p) is -inf there.

Run: python replay_loss_main.py CAPTURE_DIR
"""

import sys

import keras
import numpy as np
from replay_loss_lib import binary_log_loss

from pyadapter import NanGuard


def build_model() -> keras.Model:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.SGD(1e-2), loss=binary_log_loss, jit_compile=False)
    return model


def make_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(48, 3)).astype("float32")
    y = rng.integers(0, 2, size=(48, 1)).astype("float32")
    x[32:] *= 1e4  # the 3rd batch of 16 saturates the tanh, and the sigmoid with big weights
    return x, y


if __name__ == "__main__":
    keras.utils.set_random_seed(0)
    model = build_model()
    # Large output weights: with saturated tanh inputs the sigmoid sees |z| > 17 and rounds to exactly 0 or 1.
    kernel, bias = model.layers[-1].get_weights()
    model.layers[-1].set_weights([np.full_like(kernel, 10.0), bias])
    x, y = make_data()
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[NanGuard(sys.argv[1])])
