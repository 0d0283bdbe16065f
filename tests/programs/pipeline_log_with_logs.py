"""A tf.data map takes the log of a feature that is 0 in one row (its -inf is in the captured batch, so `nanlens
locate` runs the script again up to the step); the script keeps a run log of its own and trains with a CSVLogger,
as training scripts do."""

import time

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

with open("run_log.txt", "w") as log:
    log.write(f"run started {time.time()}\n")

x = np.abs(np.random.default_rng(0).normal(size=(64, 4))).astype("float32") + 0.1
x[40, 2] = 0.0
y = np.ones((64, 1), "float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).map(lambda a, b: (tf.math.log(a), b)).batch(8)  # ORIGIN

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(ds, epochs=2, callbacks=[NanGuard("captures"), keras.callbacks.CSVLogger("history.csv")])
