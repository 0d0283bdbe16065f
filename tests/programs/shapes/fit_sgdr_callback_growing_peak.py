"""SGDR (cosine annealing with warm restarts) written as a callback, plus ReduceLROnPlateau, as a tester wrote it
(s41e p8): each restart multiplies the peak by mult_factor=2.0 (meant to shrink it). The first cycle's peak of 0.1
trained; the second, 0.2, diverged. "Keep it from rising ... or cap it at or below 1e-4" would remove the cycles."""

import math

import keras
import numpy as np

from pyadapter import NanGuard

keras.utils.set_random_seed(8)


class SGDRScheduler(keras.callbacks.Callback):
    """Loshchilov & Hutter: restart every cycle_length epochs, each cycle mult_factor times as long."""

    def __init__(self, min_lr, max_lr, steps_per_epoch, cycle_length=2, mult_factor=1.5):
        super().__init__()
        self.min_lr = min_lr
        self.max_lr = max_lr
        self.steps_per_epoch = steps_per_epoch
        self.cycle_length = cycle_length
        self.mult_factor = mult_factor
        self.batch_since_restart = 0
        self.next_restart = cycle_length

    def clr(self):
        fraction_to_restart = self.batch_since_restart / (self.steps_per_epoch * self.cycle_length)
        return self.min_lr + 0.5 * (self.max_lr - self.min_lr) * (1 + math.cos(fraction_to_restart * math.pi))

    def on_train_begin(self, logs=None):
        self.model.optimizer.learning_rate.assign(self.max_lr)

    def on_train_batch_end(self, batch, logs=None):
        self.batch_since_restart += 1
        self.model.optimizer.learning_rate.assign(self.clr())

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == self.next_restart:
            self.batch_since_restart = 0
            self.cycle_length = np.ceil(self.cycle_length * self.mult_factor)
            self.next_restart += self.cycle_length
            self.max_lr *= self.mult_factor  # CHANGE: "grow the restarts' peak" (meant to shrink it)


rng = np.random.default_rng(8)
x = rng.normal(size=(2560, 10)).astype("float32")
y = (np.sin(x[:, :1]) + x[:, 1:2] ** 2 + 0.1 * rng.normal(size=(2560, 1))).astype("float32")

model = keras.Sequential(
    [
        keras.Input(shape=(10,)),
        keras.layers.Dense(64, activation="tanh"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(1),
    ]
)
model.compile(optimizer=keras.optimizers.SGD(momentum=0.9), loss="mse")
bs = 64
steps = int(np.ceil(0.8 * len(x) / bs))
callbacks = [
    SGDRScheduler(min_lr=1e-4, max_lr=0.1, steps_per_epoch=steps, cycle_length=1, mult_factor=2.0),
    keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=1),
    NanGuard("captures"),
]
model.fit(x, y, batch_size=bs, epochs=12, validation_split=0.2, callbacks=callbacks)
