"""fit given a tf.data pipeline made by a helper function, not shuffled: a sensor reading is missing (NaN) in row
21 of the features. Nothing in the fit call's text says it is a Dataset."""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

x = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
x[21, 1] = np.nan
y = np.nan_to_num(x).sum(axis=1, keepdims=True)


def make_dataset(features, labels):
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(8)


model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
model.fit(make_dataset(x, y), epochs=1, verbose=0, callbacks=[NanGuard("captures")])
