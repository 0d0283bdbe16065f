"""Claim counts with Keras's built-in Poisson loss on a linear output layer: Adam drives a low-risk policy's predicted
rate below 0 and the loss's log(y_pred + eps) is NaN. The loss is Keras's code; the fix is the output layer."""

import keras
import numpy as np

rng = np.random.default_rng(0)
features = rng.normal(size=(512, 4)).astype("float32")
counts = rng.poisson(np.exp(0.8 * features[:, :1] - 2.0)).astype("float32")

model = keras.Sequential(
    [
        keras.Input(shape=(4,)),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(1),  # OUTPUT
    ]
)
model.compile(optimizer=keras.optimizers.Adam(0.05), loss="poisson")
model.fit(features, counts, batch_size=32, epochs=3, verbose=0)  # ORIGIN
