"""Sensor features served by a `keras.utils.PyDataset` whose `__getitem__` takes the log of a reading: one reading
is negative, so one batch holds a NaN before the step. fit shuffles a PyDataset's batch order (its default)."""

import math

import keras
import numpy as np

from pyadapter import NanGuard


class SensorBatches(keras.utils.PyDataset):
    def __init__(self, readings, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.readings, self.batch_size = readings, batch_size

    def __len__(self):
        return math.ceil(len(self.readings) / self.batch_size)

    def __getitem__(self, index):
        rows = self.readings[index * self.batch_size : (index + 1) * self.batch_size]
        x = np.log(rows).astype("float32")  # CHANGE: a negative reading gives NaN
        return x, x.sum(axis=1, keepdims=True)


readings = np.random.default_rng(0).uniform(0.5, 2.0, size=(256, 4))
readings[200, 1] = -0.37
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
model.fit(SensorBatches(readings, 16), epochs=2, verbose=0, callbacks=[NanGuard("captures")])
