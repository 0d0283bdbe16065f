"""Poisson regression of insurance claim counts (keras Poisson loss, exponential link), written by a helper as its
users write it. A few fleet policies report the whole fleet's claims on one row, and SGD at 0.05 with momentum 0.9
diverges through the exp link. The Exp is made inside Keras (the Dense layer's activation): no frame of this file
but the fit line holds it, and the line to mark is the layer's."""
import keras
import numpy as np
from keras import layers

from pyadapter import NanGuard

rng = np.random.default_rng(42)
n = 2000
exposure = rng.uniform(0.1, 1.0, n)
age = rng.uniform(18, 80, n)
power = rng.integers(4, 15, n)
density = rng.lognormal(6, 1.5, n)
X = np.stack([exposure, age, power, np.log(density)], axis=1).astype("float32")
rate = exposure * np.exp(-2.0 + 0.01 * (age - 40) + 0.05 * power + 0.1 * np.log(density))
y = rng.poisson(rate).astype("float32")
# a few fleet policies report the whole fleet's claims on one row
y[rng.choice(n, 5, replace=False)] = rng.integers(2000, 6000, 5)

X = (X - X.mean(0)) / X.std(0)

model = keras.Sequential([
    keras.Input(shape=(4,)),
    layers.Dense(1, activation="exponential"),  # LAYER (log link)
])
model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9),  # CHANGE
              loss=keras.losses.Poisson(),
              metrics=["mae"])

model.fit(X, y, batch_size=64, epochs=20, validation_split=0.1,
          callbacks=[NanGuard("captures")])
