"""Fuel efficiency from raw car features (weights in the thousands), and the habit of trying again with a lower
learning rate when a fit goes NaN: the second fit gets a new optimizer but the same model, whose weights the first
fit had already blown up (NanGuard withheld only the last update). It fails at its first step, at any rate: what to
change is building the model again (or scaling the features), not a still lower rate."""

import keras
import numpy as np

from pyadapter import NanGuard

rng = np.random.default_rng(7)
n = 392
cyl = rng.choice([4, 6, 8], size=n)
disp = cyl * 40 + rng.normal(0, 20, n)
hp = disp * 0.5 + rng.normal(0, 15, n)
weight = 1500 + disp * 8 + rng.normal(0, 200, n)
acc = 20 - hp * 0.04 + rng.normal(0, 1.5, n)
year = rng.integers(70, 83, n)
x_train = np.stack([cyl, disp, hp, weight, acc, year], 1).astype("float32")
y_train = (46 - 0.007 * weight + 0.7 * (year - 76) + rng.normal(0, 2.5, n)).astype("float32")

keras.utils.set_random_seed(0)
model = keras.Sequential([  # CHANGE
    keras.Input((6,)),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(1),
])

for lr in (3e-6, 1e-6):
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=lr), loss="mean_squared_error")
    history = model.fit(x_train, y_train, epochs=10, batch_size=32, verbose=0, callbacks=[NanGuard("captures")])
    if not model.stop_training:
        break
    print(f"learning rate {lr} went NaN; trying a lower one")
