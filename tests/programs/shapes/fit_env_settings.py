"""Settings from environment variables, as a cluster launch script passes them (``LR=0.5 HIDDEN=64 python
train.py``): the rate is too high for these unscaled features, and the run diverges."""

import os

import keras
import numpy as np

from pyadapter import NanGuard

LR = float(os.environ.get("LR", "0.001"))
HIDDEN = int(os.environ.get("HIDDEN", "32"))

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = (rng.normal(size=(512, 8)) * 10.0).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(HIDDEN, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(LR), loss="mse")
model.fit(x, y, batch_size=32, epochs=20, verbose=0, callbacks=[NanGuard("captures")])
