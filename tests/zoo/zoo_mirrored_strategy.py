"""Zoo: MirroredStrategy over two logical CPUs (percentage error on zero targets).

A regression model trained with ``tf.distribute.MirroredStrategy`` on two logical CPU devices, with a hand-written
mean absolute percentage error |y - p| / |y|. Some targets are exactly 0 (idle machines): x / 0 is inf and
0 / 0 is NaN on whichever replica gets them.
Fix: divide by ``tf.maximum(tf.abs(y_true), epsilon)`` (as ``keras.losses.MeanAbsolutePercentageError`` does).
"""
# CAUSE: op: a wrong op on finite, in-range inputs

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

FEATURES = 6


def use_two_cpus() -> None:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)


def mape(y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean(tf.abs(y_true - y_pred) / tf.abs(y_true), axis=-1)  # ORIGIN: targets of 0 divide by zero


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, FEATURES)).astype("float32")
    y = np.abs(x @ rng.normal(size=(FEATURES, 1))).astype("float32")
    y[100:110] = 0.0  # idle machines report a load of exactly 0
    return x, y


def main() -> tuple[keras.Model, keras.callbacks.History]:
    use_two_cpus()
    keras.utils.set_random_seed(0)
    x, y = make_data()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=mape)
    guard = NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))
    history = model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0, callbacks=[guard])
    return model, history


if __name__ == "__main__":
    model, history = main()
    losses = history.history.get("loss", [])
    weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
    non_finite = bool(model.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
    print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
    sys.exit(1 if non_finite else 0)
