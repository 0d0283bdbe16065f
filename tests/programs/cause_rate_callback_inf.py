"""A warm-up, then an inverse-square-root learning rate, set each epoch by a LearningRateScheduler callback (the
shape of many tutorials' "Noam" schedules written as a function of the epoch). The function divides by
sqrt(epoch - WARMUP), which is 0 at the first epoch after the warm-up: the rate is inf there, and the first step of
that epoch turns finite gradients into a non-finite update. Training at module level, as example scripts do."""

import keras
import numpy as np

from pyadapter import NanGuard

WARMUP = 2
BASE_LR = 1e-3


def lr_at(epoch, lr):
    if epoch < WARMUP:
        return BASE_LR * (epoch + 1) / WARMUP
    return BASE_LR / np.sqrt(epoch - WARMUP)


keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(320, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
model.compile(keras.optimizers.Adam(BASE_LR), "mse")
schedule = keras.callbacks.LearningRateScheduler(lr_at)  # CHANGE
model.fit(x, y, batch_size=32, epochs=4, verbose=0, callbacks=[schedule, NanGuard("captures")])
