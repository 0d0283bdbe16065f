"""Sensor regression fed by a `keras.utils.PyDataset` subclass that serves batches by index, with a second one as
`validation_data`. A custom layer adds the square root of each reading as a feature; a sensor that glitched below
zero makes it NaN.

Run: python data_pydataset.py CAPTURE_DIR
"""

import math
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard


class SensorBatches(keras.utils.PyDataset):
    def __init__(self, n, batch_size, seed, **kwargs):
        super().__init__(**kwargs)
        self.batch_size = batch_size
        rng = np.random.default_rng(seed)
        self.x = rng.uniform(0.5, 2.0, size=(n, 6)).astype("float32")
        self.y = self.x.sum(axis=1, keepdims=True)
        if seed == 0:
            self.x[77, 2] = -0.25  # a glitch

    def __len__(self):
        return math.ceil(len(self.x) / self.batch_size)

    def __getitem__(self, index):
        rows = slice(index * self.batch_size, (index + 1) * self.batch_size)
        return self.x[rows], self.y[rows]


class WithSquareRoots(keras.layers.Layer):
    def call(self, x):
        return tf.concat([x, tf.sqrt(x)], axis=-1)  # ORIGIN


model = keras.Sequential([keras.Input((6,)), WithSquareRoots(), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
model.fit(
    SensorBatches(192, 16, seed=0),
    validation_data=SensorBatches(64, 16, seed=1),
    epochs=2,
    callbacks=[NanGuard(sys.argv[1])],
    verbose=0,
)
