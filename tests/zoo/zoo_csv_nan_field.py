"""Zoo: a ``nan`` field in a CSV file read with ``make_csv_dataset`` into fit.

A turbine's sensor log is exported to ``turbine.csv`` by another program with ``np.savetxt``, which writes a
missing reading as the text ``nan``. The training script reads the file with
``tf.data.experimental.make_csv_dataset``, which parses ``nan`` as a float NaN without complaint, packs the
columns into a feature vector and trains with ``fit``. The first batch holding that row makes the loss NaN. No
TensorFlow op creates the NaN: it arrives with the batch.
Fix: filter out rows with non-finite fields where the file is read, e.g.
``ds.filter(lambda x, y: tf.reduce_all(tf.math.is_finite(x)))`` (or clean the export).
"""
# CAUSE: data: the NaN is in the CSV file, before any op

from __future__ import annotations

import os
import sys
import tempfile

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

COLUMNS = ["wind_speed", "rotor_rpm", "pitch", "temperature", "power"]


def export_sensor_log(folder: str, seed: int = 0) -> str:
    """Stands in for the export job that wrote turbine.csv: 800 rows, one reading missing in row 515."""
    rng = np.random.default_rng(seed)
    wind = rng.uniform(3.0, 20.0, 800)
    rpm = wind * 1.1 + rng.normal(0.0, 0.5, 800)
    pitch = rng.uniform(0.0, 10.0, 800)
    temperature = rng.normal(15.0, 8.0, 800)
    power = 0.02 * wind**3 - 0.05 * pitch + rng.normal(0.0, 1.0, 800)
    table = np.stack([wind, rpm, pitch, temperature, power], axis=1)
    table[515, 1] = np.nan  # the rpm sensor dropped out
    path = os.path.join(folder, "turbine.csv")
    np.savetxt(path, table, delimiter=",", header=",".join(COLUMNS), comments="", fmt="%.4f")
    return path


def pack(features: dict[str, tf.Tensor], label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    return tf.stack([features[name] for name in COLUMNS[:-1]], axis=-1) / 20.0, label


def main(folder: str) -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    path = export_sensor_log(folder)
    dataset = tf.data.experimental.make_csv_dataset(path, batch_size=32, label_name="power", num_epochs=1, shuffle=False)  # ORIGIN: the row with `nan` is read as is; filter non-finite rows here
    dataset = dataset.map(pack)
    model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    guard = NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))
    history = model.fit(dataset, epochs=2, verbose=0, callbacks=[guard])
    return model, history


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        model, history = main(folder)
    losses = history.history.get("loss", [])
    weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
    non_finite = bool(model.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
    print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
    sys.exit(1 if non_finite else 0)
