"""Bike-sharing demand: hourly rental counts, Poisson regression head.
Trainer class with a config dict, Adam with gradient accumulation (as in many research repos): four steps are one
update, and the first update, at a rate 300x too high, moves the weights past what the exp can hold."""

import keras
import numpy as np
from keras import layers

from pyadapter import NanGuard

CONFIG = {
    "hidden": [64, 64],
    "learning_rate": 3e-1,  # CHANGE: meant 3e-4
    "weight_decay": 1e-2,
    "ema_momentum": 0.999,
    "batch_size": 64,
    "epochs": 5,
}


def make_data(n=4096, seed=0):
    rng = np.random.default_rng(seed)
    hour = rng.integers(0, 24, n)
    temp = rng.normal(15, 8, n)
    hum = rng.uniform(0.2, 1.0, n)
    workday = rng.integers(0, 2, n)
    rate = np.exp(1.0 + 0.8 * np.sin(hour / 24 * 2 * np.pi) + 0.04 * temp - 0.5 * hum + 0.3 * workday)
    counts = rng.poisson(rate)
    feats = np.stack(
        [np.sin(hour / 24 * 2 * np.pi), np.cos(hour / 24 * 2 * np.pi), (temp - 15) / 8, hum, workday], axis=1
    ).astype("float32")
    return feats, counts.astype("float32")


class DemandModelTrainer:
    def __init__(self, config):
        self.config = config
        self.model = self._build()

    def _build(self):
        inputs = keras.Input(shape=(5,))
        h = inputs
        for units in self.config["hidden"]:
            h = layers.Dense(units, activation="relu")(h)
        outputs = layers.Dense(1, activation="exponential", name="rate")(h)  # ORIGIN
        model = keras.Model(inputs, outputs)
        optimizer = keras.optimizers.Adam(
            learning_rate=self.config["learning_rate"],
            gradient_accumulation_steps=4,
        )
        model.compile(optimizer=optimizer, loss="poisson", metrics=["mae"])
        return model

    def train(self, x, y):
        return self.model.fit(
            x,
            y,
            batch_size=self.config["batch_size"],
            epochs=self.config["epochs"],
            validation_split=0.1,
            callbacks=[NanGuard("captures")],
        )


if __name__ == "__main__":
    x, y = make_data()
    trainer = DemandModelTrainer(CONFIG)
    trainer.train(x, y)
