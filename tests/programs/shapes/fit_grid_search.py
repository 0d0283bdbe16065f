"""A small hyperparameter grid, as scripts write it before reaching for a tuner: a model per (width, learning rate),
each compiled and fit in turn at module level with a NanGuard; the widest, at learning rate 3, diverges.
Fix: drop learning rates that large from the grid."""

import keras
import numpy as np

from pyadapter import NanGuard

keras.utils.set_random_seed(1)
rng = np.random.default_rng(1)
x = rng.normal(size=(512, 10)).astype("float32")
y = (x @ rng.normal(size=(10, 1)) * 3).astype("float32")

results = {}
for width, lr in [(16, 1e-3), (32, 1e-2), (64, 3.0)]:
    model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(width, activation="relu"), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(lr), "mse")
    history = model.fit(x, y, batch_size=32, epochs=5, verbose=0, callbacks=[NanGuard("captures")])
    results[(width, lr)] = history.history["loss"][-1]
print("grid:", results)
