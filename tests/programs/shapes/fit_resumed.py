"""A run resumed from its checkpoint, as one writes it: train two epochs and save; later, load the model, raise
the learning rate to go faster, and fit on from epoch 2. The resumed fit diverges. Both fits have the same model,
optimizer and weights: only the line that calls fit tells them apart.
Fix: keep the rate (or lower it)."""

import keras
import numpy as np

from pyadapter import NanGuard

keras.utils.set_random_seed(3)
rng = np.random.default_rng(3)
x = (rng.normal(size=(1200, 12)) * 4.0 + 2.0).astype("float32")
y = (x @ rng.normal(size=(12, 1)) + 5.0).astype("float32")

model = keras.Sequential([keras.Input(shape=(12,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(learning_rate=1e-4, momentum=0.9), loss="mse")
model.fit(x, y, epochs=2, batch_size=32, verbose=0, callbacks=[NanGuard("captures")])
model.save("checkpoint.keras")

# ... later: resume from the checkpoint, and train faster
model = keras.models.load_model("checkpoint.keras")
model.optimizer.learning_rate = 0.02  # CHANGE
model.fit(x, y, initial_epoch=2, epochs=6, batch_size=32, verbose=0, callbacks=[NanGuard("captures")])  # ORIGIN
