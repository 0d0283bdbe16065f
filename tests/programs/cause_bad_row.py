"""A regression fed from ``readings.csv`` (in the working folder), where one row has an empty field that
``np.genfromtxt`` reads as NaN. No op makes the NaN: it arrives with the batch. Used by tests/test_cause_programs.py:
the cause must be ``data``, the line to change the reading line (marked ``# CHANGE``), and the provenance the
index of the row in the array passed to fit and its line in the file.

Usage: cause_bad_row.py CAPTURE_DIR   (run in the folder holding readings.csv)
"""

from __future__ import annotations

import sys

import keras
import numpy as np

from pyadapter import NanGuard

FEATURES = 5


def load_readings() -> tuple[np.ndarray, np.ndarray]:
    table = np.genfromtxt("readings.csv", delimiter=",", dtype=np.float32)  # CHANGE
    return table[:, :FEATURES], table[:, FEATURES:]


def main(capture_dir: str) -> int:
    keras.utils.set_random_seed(0)
    x, y = load_readings()
    model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse", jit_compile=False)
    model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0, callbacks=[NanGuard(capture_dir)])
    print("stopped by NanGuard" if model.stop_training else "training stayed finite")
    return 0 if model.stop_training else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
