"""Sensor features saved as .npy files, standardized after loading as every tutorial does, then a small regression.
One sensor was stuck for the whole export (a constant column): its std is 0, and the standardization makes that
column NaN in every row. The read is fine; the division is what to change."""

import keras
import numpy as np

from pyadapter import NanGuard

raw = np.load("features.npy")
target = np.load("target.npy")
mean, std = raw.mean(axis=0), raw.std(axis=0)
features = (raw - mean) / std  # CHANGE: a constant column has std 0

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
model.fit(features, target, epochs=2, batch_size=32, verbose=0, callbacks=[NanGuard("captures")])
