"""Zoo: an eager custom training loop without a guard, run with a dump (log(1 - exp(0))).

A survival model predicts an event rate and maximizes log P(event by time t) = log(1 - exp(-rate * t)). Some
records have a duration of exactly 0 (logged in the same second), so 1 - exp(0) = 0 and log(0) = -inf.
Fix: drop zero durations, or clamp rate * t to at least a small epsilon inside the log.
"""
# CAUSE: op: a wrong op on finite, in-range inputs

from __future__ import annotations

import sys

import keras
import numpy as np
import tensorflow as tf

FEATURES = 5


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(192, FEATURES)).astype("float32")
    durations = rng.exponential(scale=2.0, size=(192, 1)).astype("float32")
    durations[70] = 0.0  # logged in the same second as the start
    return x, durations


def event_log_likelihood(rate: tf.Tensor, durations: tf.Tensor) -> tf.Tensor:
    return tf.math.log(1.0 - tf.exp(-rate * durations))  # ORIGIN: a duration of 0 gives log(0) = -inf


def main() -> int:
    keras.utils.set_random_seed(0)
    x, durations = make_data()
    model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1, activation="softplus")])
    optimizer = keras.optimizers.Adam(1e-3)
    for epoch in range(2):
        for start in range(0, len(x), 32):
            xb, db = tf.constant(x[start:start + 32]), tf.constant(durations[start:start + 32])
            with tf.GradientTape() as tape:
                loss = -tf.reduce_mean(event_log_likelihood(model(xb, training=True), db))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            if not np.isfinite(float(loss)):
                print(f"zoo: training went non-finite (epoch {epoch}, row {start}, loss {float(loss)})")
                return 1
    print("zoo: training stayed finite")
    return 0


if __name__ == "__main__":
    sys.exit(main())
