"""A regression trained from ``sensors.tfrecord`` in the working folder (written on the first run, as a cached
preprocessing step), read with ``TFRecordDataset`` + ``parse_single_example``, shuffled with a seed and batched
into fit. Two records hold a non-finite feature: record 613 an ``inf`` in feature 2 (a ratio over a zero
reading), record 880 a ``nan`` in feature 0 (a missing reading). Whichever the shuffled order brings first makes
the loss non-finite. Used by tests/test_data_provenance.py: the provenance must name sensors.tfrecord and the
record whose values are the captured batch row.

Usage: tfrecord_shuffle.py CAPTURE_DIR   (run in the folder that holds, or will hold, sensors.tfrecord)
"""

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

PATH = "sensors.tfrecord"
SPEC = {
    "features": tf.io.FixedLenFeature([4], tf.float32),
    "target": tf.io.FixedLenFeature([1], tf.float32),
}


def write_records(path: str, n: int = 1000) -> None:
    rng = np.random.default_rng(5)
    table = rng.normal(size=(n, 4)).round(3)
    target = (table @ np.array([0.5, -1.0, 0.25, 2.0]) + rng.normal(0.0, 0.1, n)).round(3)
    table[613, 2] = np.inf
    table[880, 0] = np.nan
    with tf.io.TFRecordWriter(path) as writer:
        for row, y in zip(table, target):
            example = tf.train.Example(features=tf.train.Features(feature={
                "features": tf.train.Feature(float_list=tf.train.FloatList(value=row)),
                "target": tf.train.Feature(float_list=tf.train.FloatList(value=[y])),
            }))
            writer.write(example.SerializeToString())


def parse(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    example = tf.io.parse_single_example(record, SPEC)
    return example["features"], example["target"]


def main(capture_dir: str) -> int:
    keras.utils.set_random_seed(0)
    if not os.path.exists(PATH):
        write_records(PATH)
    dataset = tf.data.TFRecordDataset(PATH).map(parse).shuffle(1000, seed=11).batch(32)  # CHANGE
    model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    model.fit(dataset, epochs=2, verbose=0, callbacks=[NanGuard(capture_dir)])
    print("stopped by NanGuard" if model.stop_training else "training stayed finite")
    return 0 if model.stop_training else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
