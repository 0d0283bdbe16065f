"""A Colab-style pump-failure model: each sample is a pressure trace (readings near 1000 hPa, flat ones varying by
0.01) and a Lambda layer computes its std in one pass, sqrt(mean(r^2) - mean(r)^2). The squares are about 1e6, which
float32 holds 0.06 apart, so a flat trace's variance of 1e-4 is lost and comes out negative: sqrt of it is NaN. The
advice was to make the input positive by construction with a softplus "where the model learns it": nothing is
learned there."""

import keras
import numpy as np
from keras import ops

from pyadapter import NanGuard

keras.utils.set_random_seed(2)
rng = np.random.default_rng(2)
base = rng.uniform(990.0, 1030.0, size=(512, 1))
spread = np.where(rng.random((512, 1)) < 0.3, 0.01, 2.0)
readings = (base + rng.normal(size=(512, 48)) * spread).astype("float32")
failed = (spread[:, 0] > 1.0).astype("float32")

inputs = keras.Input((48,), name="readings")
std = keras.layers.Lambda(lambda r: ops.sqrt(ops.mean(r**2, axis=-1, keepdims=True) - ops.mean(r, axis=-1, keepdims=True) ** 2))(inputs)  # CHANGE
hidden = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()([std, inputs / 1000.0]))
outputs = keras.layers.Dense(1, activation="sigmoid")(hidden)
model = keras.Model(inputs, outputs)
model.compile(optimizer="adam", loss="binary_crossentropy")
model.fit(readings, failed, batch_size=64, epochs=2, verbose=0, callbacks=[NanGuard("captures")])
