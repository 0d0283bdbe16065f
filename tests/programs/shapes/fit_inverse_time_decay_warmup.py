"""A classifier with the "Overfit and underfit" tutorial's InverseTimeDecay schedule, edited by a user who wanted the
rate to rise first: decay_rate=-1 makes 1 + decay_rate * step / decay_steps reach 0 at step 20 (s41c p10). The rate
is infinite there and the update NaN. The cause said Adam's epsilon was 0, with Keras's default epsilon set."""

import keras
import numpy as np

from pyadapter import NanGuard

keras.utils.set_random_seed(4)
rng = np.random.default_rng(4)
features = rng.normal(size=(2000, 28)).astype("float32")
labels = (features[:, :3].sum(axis=1) > 0).astype("float32")

STEPS_PER_EPOCH = 20
lr_schedule = keras.optimizers.schedules.InverseTimeDecay(
    0.001,
    decay_steps=STEPS_PER_EPOCH,
    decay_rate=-1,  # CHANGE: a rate that decays is above 0
    staircase=False,
)
model = keras.Sequential(
    [keras.Input((28,)), keras.layers.Dense(16, activation="elu"), keras.layers.Dense(1)]
)
model.compile(
    optimizer=keras.optimizers.Adam(lr_schedule),
    loss=keras.losses.BinaryCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
model.fit(features, labels, batch_size=100, epochs=3, verbose=0, callbacks=[NanGuard("captures")])
