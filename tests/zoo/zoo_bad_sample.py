"""Zoo: one bad sample in the data (an empty CSV field read as NaN).

The readings come from a CSV file in which one row has an empty field. ``np.genfromtxt`` turns it into NaN
without a word, and the first batch containing that row makes the loss NaN. No TensorFlow op creates the NaN:
it arrives with the batch.
Fix: drop or impute incomplete rows where the file is read.
"""
# CAUSE: data: the NaN is in the array as read, before any op

from __future__ import annotations

import io
import os
import sys

import keras
import numpy as np

from pyadapter import NanGuard

FEATURES = 5


def csv_text(seed: int = 0) -> str:
    """Stands in for readings.csv on disk: 400 rows, row 170 has an empty field."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(400, FEATURES + 1)).round(4)
    lines = [",".join(str(v) for v in row) for row in rows]
    fields = lines[170].split(",")
    fields[3] = ""
    lines[170] = ",".join(fields)
    return "\n".join(lines)


def load_readings() -> tuple[np.ndarray, np.ndarray]:
    table = np.genfromtxt(io.StringIO(csv_text()), delimiter=",", dtype=np.float32)  # ORIGIN: an empty field becomes NaN; drop or impute incomplete rows here
    return table[:, :FEATURES], table[:, FEATURES:]


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = load_readings()
    model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
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
