"""Train the user-embedding classifier. Run from the project root:

    python scripts/train.py

Everything the run writes (log, captures, weights) goes to runs/<name>/.

An all-zero feature row has norm 0, and the layer's x / norm is 0 / 0 = NaN. Fix: tf.math.l2_normalize (it adds an
epsilon), or drop the empty rows.
"""

import os

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

RUN_NAME = "exp1"
DATA = "data/train.npz"  # relative to the project root

arrays = np.load(DATA)
x_train, y_train = arrays["x"], arrays["y"]

run_dir = os.path.join("runs", RUN_NAME)
os.makedirs(run_dir, exist_ok=True)
os.chdir(run_dir)  # all outputs of this run land here


class L2Normalize(keras.layers.Layer):
    """Project each feature vector onto the unit sphere (cosine-similarity features)."""

    def call(self, x):
        return x / tf.norm(x, axis=-1, keepdims=True)  # ORIGIN


keras.utils.set_random_seed(4)
model = keras.Sequential(
    [
        keras.Input(shape=(x_train.shape[1],)),
        L2Normalize(),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(4),
    ]
)
model.compile(
    optimizer=keras.optimizers.Adam(1e-3),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
model.fit(
    x_train,
    y_train,
    batch_size=64,
    epochs=2,
    verbose=0,
    callbacks=[keras.callbacks.CSVLogger("log.csv"), NanGuard("captures")],
)
model.save_weights("final.weights.h5")
