"""Zoo: float16 overflow without loss scaling (a summed loss under mixed_float16).

A custom training loop under the ``mixed_float16`` policy, with a plain optimizer (no LossScaleOptimizer). The
targets are prices around 1000, and the loss sums squared errors over the batch in the model's float16 output
dtype: a squared error of 1000^2 is already past 65504, the largest float16, and becomes inf, and the summed
loss's gradients overflow float16 in the backward pass too. Nothing detects the overflow and skips the step, so
inf/NaN gradients would reach the float32 weights.
Fix: compute the loss in float32 (``tf.cast(pred, tf.float32)``) and average it; wrap the optimizer in
``keras.optimizers.LossScaleOptimizer`` so overflowing steps are skipped.
"""
# CAUSE: precision: the squared errors overflow float16 (65504); float32 would hold them

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NonFiniteStepError, guard_step

FEATURES = 16

keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(1e-5)
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)


@guard_step(checkpoint=checkpoint, capture_dir=os.environ.get("NANLENS_CAPTURE_DIR", "captures"))
@tf.function
def train_step(xb: tf.Tensor, yb: tf.Tensor) -> tf.Tensor:
    with tf.GradientTape() as tape:
        pred = model(xb, training=True)  # float16 under mixed_float16
        loss = tf.reduce_sum(tf.square(tf.cast(yb, pred.dtype) - pred))  # ORIGIN: the float16 sum overflows past 65504
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return tf.cast(loss, tf.float32)


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(1024, FEATURES)).astype("float32")
    y = (x @ rng.normal(size=(FEATURES, 1)) * 100.0 + 1000.0).astype("float32")  # prices around 1000
    return x, y


def main() -> int:
    x, y = make_data()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(128)
    try:
        for _ in range(2):
            for xb, yb in dataset:
                train_step(xb, yb)
    except NonFiniteStepError as error:
        print(f"zoo: training went non-finite: {error}")
        return 1
    print("zoo: training stayed finite")
    return 0


if __name__ == "__main__":
    sys.exit(main())
