"""A regression trained with SGD + momentum on a cosine schedule with a linear warm-up, as the Keras docs show it;
the warm-up target is 5.0 where 0.05 was meant, so the loss blows up a few steps after the warm-up."""

import keras
import numpy as np

from pyadapter import NanGuard

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 16)).astype("float32")
y = np.sin(x @ (rng.normal(size=(16, 1)) / 4.0)).astype("float32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(64, activation="tanh"), keras.layers.Dense(1)])
schedule = keras.optimizers.schedules.CosineDecay(0.0, 100, warmup_target=5.0, warmup_steps=5)  # CHANGE
model.compile(optimizer=keras.optimizers.SGD(schedule, momentum=0.9), loss="mse")
model.fit(x, y, batch_size=64, epochs=4, verbose=0, callbacks=[NanGuard("captures")])
