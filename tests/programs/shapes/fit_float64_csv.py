"""Parcel weight regression from a CSV read with numpy: np.genfromtxt gives float64 arrays, which Keras casts to
float32 for the step. One row has an empty 'weight' field (NaN)."""

import keras
import numpy as np
from keras import layers

from pyadapter import NanGuard

data = np.genfromtxt("parcels.csv", delimiter=",", skip_header=1)
x, y = data[:, :3], data[:, 3]

model = keras.Sequential([keras.Input(shape=(3,)), layers.Dense(32, activation="relu"), layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
model.fit(x, y, epochs=5, batch_size=16, verbose=0, callbacks=[NanGuard("captures")])
