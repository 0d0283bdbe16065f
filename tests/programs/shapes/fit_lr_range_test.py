"""A learning-rate range test (fast.ai's "LR finder") as users write it for Keras: a callback multiplies the rate
by a constant factor after every batch and the loss is watched until it blows up, here with no stop check. The
rate that diverges is made by the callback, not written on the optimizer's line."""

import keras
import numpy as np

from pyadapter import NanGuard


class LRFinder(keras.callbacks.Callback):
    def __init__(self, factor=1.1):
        super().__init__()
        self.factor = factor
        self.rates, self.losses = [], []

    def on_train_batch_end(self, batch, logs=None):
        lr = self.model.optimizer.learning_rate
        self.rates.append(float(lr.numpy()))
        self.losses.append(logs["loss"])
        lr.assign(lr * self.factor)  # CHANGE


rng = np.random.default_rng(0)
x = rng.normal(size=(2048, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(1e-4), loss="mse")
model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[LRFinder(), NanGuard("captures")])
