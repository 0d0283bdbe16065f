"""A script run from its project's root (`python src/train.py`), reading its settings with a path relative to where
it runs, training at module level. Its loss takes the log of a linear output, which goes negative."""

import json

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

with open("configs/run.json") as f:
    config = json.load(f)

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 4)).astype("float32")
y = rng.uniform(1, 2, size=(256, 1)).astype("float32")
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(config["lr"]), loss=lambda t, p: tf.reduce_mean(tf.math.log(p) - t))
model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[NanGuard("captures")])
