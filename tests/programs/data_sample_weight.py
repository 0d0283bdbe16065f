"""An imbalanced classifier trained on a tf.data pipeline of (x, y, sample_weight) triples, with its
cross-entropy written by hand: log(1 - p) of a sigmoid that saturates at 1.0 is -inf.

Run: python data_sample_weight.py CAPTURE_DIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

keras.utils.set_random_seed(1)
rng = np.random.default_rng(1)
x = (rng.normal(size=(640, 8)) * 30).astype("float32")  # not normalized
y = (x[:, 0] > 20).astype("float32")[:, None]
weights = np.where(y[:, 0] == 1, 4.0, 1.0).astype("float32")


def cross_entropy(y_true, y_pred):
    return -tf.reduce_mean(y_true * tf.math.log(y_pred) + (1 - y_true) * tf.math.log(1 - y_pred), axis=-1)  # ORIGIN


model = keras.Sequential([
    keras.Input((8,)),
    keras.layers.Dense(16, activation="relu"),
    keras.layers.Dense(1, activation="sigmoid"),
])
model.compile(optimizer=keras.optimizers.Adam(0.05), loss=cross_entropy)
data = tf.data.Dataset.from_tensor_slices((x, y, weights)).shuffle(640, seed=0).batch(32)
model.fit(data, epochs=5, callbacks=[NanGuard(sys.argv[1])], verbose=0)
