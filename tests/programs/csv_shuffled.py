"""A rain-amount regression read from ``weather.csv`` in the working folder with ``make_csv_dataset`` (which
shuffles by default), the feature columns packed into one normalized vector. One row of the file holds ``nan``
for a reading. Used by tests/test_data_provenance.py: the provenance must name weather.csv and the line of that
row (found by its values: the shuffled order gives no position), and the hover must link to it.

Usage: csv_shuffled.py CAPTURE_DIR   (run in the folder holding weather.csv)
"""

from __future__ import annotations

import sys

import keras
import tensorflow as tf

from pyadapter import NanGuard

COLUMNS = ["pressure", "humidity", "wind", "temperature"]


def pack(features, label):
    x = tf.stack([features[name] for name in COLUMNS], axis=-1)
    return (x - 50.0) / 50.0, label


def main(capture_dir: str) -> int:
    keras.utils.set_random_seed(0)
    dataset = tf.data.experimental.make_csv_dataset("weather.csv", batch_size=16, label_name="rain", num_epochs=1)  # CHANGE
    dataset = dataset.map(pack)
    model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    model.fit(dataset, epochs=2, verbose=0, callbacks=[NanGuard(capture_dir)])
    print("stopped by NanGuard" if model.stop_training else "training stayed finite")
    return 0 if model.stop_training else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
