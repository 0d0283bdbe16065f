"""Zoo: an infinite feature in a TFRecord file read with ``TFRecordDataset`` into fit.

An upstream job wrote ``listings.tfrecord``, one ``tf.train.Example`` per flat listing, with a feature vector that
includes the price per square metre. One listing was entered with an area of 0, and the job's ``price / area``
stored ``inf`` in that record. The training script reads the file with ``tf.data.TFRecordDataset`` and
``tf.io.parse_single_example`` and trains with ``fit``; the first batch holding that record makes the loss
non-finite. No TensorFlow op creates the inf: it arrives with the batch.
Fix: filter out records with non-finite features where the file is read, e.g.
``ds.filter(lambda x, y: tf.reduce_all(tf.math.is_finite(x)))`` (or fix the upstream job).
"""
# CAUSE: data: the inf is in the TFRecord file, before any op

from __future__ import annotations

import os
import sys
import tempfile

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

FEATURES = 4


def write_listings(folder: str, n: int = 700, seed: int = 0) -> str:
    """Stands in for the upstream job that wrote listings.tfrecord; record 390 has an area of 0."""
    rng = np.random.default_rng(seed)
    area = rng.uniform(20.0, 150.0, n)
    rooms = rng.integers(1, 6, n).astype("float64")
    floor = rng.integers(0, 12, n).astype("float64")
    price = area * rng.uniform(3000.0, 6000.0, n)
    area[390] = 0.0  # entered without its area
    with np.errstate(divide="ignore"):
        per_m2 = price / area / 1000.0  # thousands per m^2; inf for the listing with area 0
    rent = price * 0.004 / 1000.0
    path = os.path.join(folder, "listings.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(n):
            features = [area[i] / 100.0, rooms[i], floor[i] / 10.0, per_m2[i]]
            example = tf.train.Example(features=tf.train.Features(feature={
                "features": tf.train.Feature(float_list=tf.train.FloatList(value=features)),
                "rent": tf.train.Feature(float_list=tf.train.FloatList(value=[rent[i]])),
            }))
            writer.write(example.SerializeToString())
    return path


SPEC = {
    "features": tf.io.FixedLenFeature([FEATURES], tf.float32),
    "rent": tf.io.FixedLenFeature([1], tf.float32),
}


def parse(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    example = tf.io.parse_single_example(record, SPEC)
    return example["features"], example["rent"]


def main(folder: str) -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    path = write_listings(folder)
    dataset = tf.data.TFRecordDataset(path).map(parse)  # ORIGIN: the record with an infinite feature is read as is; filter non-finite records here
    dataset = dataset.batch(32)
    model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
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
