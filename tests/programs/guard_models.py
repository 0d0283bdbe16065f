"""Tiny models and data with a known bad batch, shared by the NanGuard tests and their subprocess programs."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

BATCH = 8
FEATURES = 4


def data(batches: int = 6, bad_batch: int | None = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x, y with one NaN input row in `bad_batch` (so that step's loss and gradients are NaN)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(BATCH * batches, FEATURES)).astype("float32")
    y = rng.normal(size=(BATCH * batches, 1)).astype("float32")
    if bad_batch is not None:
        x[bad_batch * BATCH + 1, 2] = np.nan
    return x, y


def sequential() -> keras.Model:
    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(6, activation="tanh"), keras.layers.Dense(1)])


def functional_dict() -> keras.Model:
    a = keras.Input((FEATURES,), name="a")
    b = keras.Input((2,), name="b")
    h = keras.layers.Concatenate()([keras.layers.Dense(5, activation="tanh")(a), b])
    return keras.Model({"a": a, "b": b}, keras.layers.Dense(1)(h))


@keras.saving.register_keras_serializable(package="guard_tests")
class DropoutNet(keras.Model):
    """Subclassed, with dropout (a SeedGenerator) and a custom train_step that calls super()."""

    def __init__(self, units: int = 6, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.hidden = keras.layers.Dense(units, activation="tanh")
        self.drop = keras.layers.Dropout(0.3, seed=5)
        self.out = keras.layers.Dense(1)
        self.seen_steps = 0

    def call(self, x, training=False):
        return self.out(self.drop(self.hidden(x), training=training))

    def train_step(self, data):
        self.seen_steps += 1  # Python side effect: runs at trace time only
        return super().train_step(data)

    def get_config(self):
        return {**super().get_config(), "units": self.units}


@keras.saving.register_keras_serializable(package="guard_tests")
class ManualStepNet(keras.Model):
    """A custom train_step in the style of the Keras guide: compute_loss + optimizer.apply."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(6, activation="tanh")
        self.out = keras.layers.Dense(1)

    def call(self, x, training=False):
        return self.out(self.hidden(x))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


def weights_equal(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def all_finite(arrays: list[np.ndarray]) -> bool:
    return all(np.isfinite(a).all() for a in arrays if np.asarray(a).dtype.kind == "f")


class BreaksAtStep(keras.optimizers.SGD):
    """An optimizer bug: at step `at` its update is infinite (an inf factor on the gradient, as a slot divided by 0
    would give) from a finite rate and finite gradients, so only the weights after the update show it."""

    def __init__(self, at: int, learning_rate: float = 0.01) -> None:
        super().__init__(learning_rate=learning_rate)
        self.at = at

    def update_step(self, gradient, variable, learning_rate):
        factor = tf.where(tf.equal(self.iterations, self.at), tf.constant(np.inf, tf.float32), 1.0)
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.IndexedSlices(gradient.values * factor, gradient.indices, gradient.dense_shape)
        else:
            gradient = gradient * factor
        super().update_step(gradient, variable, learning_rate)
