"""A cyclical learning rate (Smith 2017, triangular policy) written as a Keras callback, as a tester wrote it (s41e
p6), given max_lr=6e-1 (meant 6e-3): the run diverges at 0.259 on the way up. The change said "keep it from rising
... or cap it at or below 0.001", which makes the cycle a constant; the peak is what to lower."""

import keras
import numpy as np

from pyadapter import NanGuard

keras.utils.set_random_seed(5)


class CyclicLR(keras.callbacks.Callback):
    def __init__(self, base_lr=1e-3, max_lr=6e-3, step_size=200):
        super().__init__()
        self.base_lr = base_lr
        self.max_lr = max_lr
        self.step_size = step_size
        self.iteration = 0

    def clr(self):
        cycle = np.floor(1 + self.iteration / (2 * self.step_size))
        x = np.abs(self.iteration / self.step_size - 2 * cycle + 1)
        return self.base_lr + (self.max_lr - self.base_lr) * max(0.0, 1 - x)

    def on_train_begin(self, logs=None):
        self.model.optimizer.learning_rate.assign(self.base_lr)

    def on_train_batch_end(self, batch, logs=None):
        self.iteration += 1
        self.model.optimizer.learning_rate.assign(self.clr())


rng = np.random.default_rng(5)
x = rng.normal(size=(6400, 20)).astype("float32")
w = rng.normal(size=(20, 1)).astype("float32")
y = (x @ w + 0.1 * rng.normal(size=(6400, 1))).astype("float32")

model = keras.Sequential(
    [
        keras.Input(shape=(20,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(1),
    ]
)
model.compile(optimizer=keras.optimizers.SGD(learning_rate=1e-3, momentum=0.9), loss="mse")
clr = CyclicLR(base_lr=1e-3, max_lr=6e-1, step_size=100)  # CHANGE: meant 6e-3
model.fit(x, y, batch_size=32, epochs=4, callbacks=[clr, NanGuard("captures")])
