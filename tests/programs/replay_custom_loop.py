"""A custom training loop (tf.function step guarded by guard_step) that divides by a row sum which is 0 in
the 4th batch.

Run: python replay_custom_loop.py CAPTURE_DIR  (guard_step writes a bundle there and raises).
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NonFiniteStepError, guard_step

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
optimizer = keras.optimizers.Adam(1e-2)
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
CAPTURE_DIR = sys.argv[1] if len(sys.argv) > 1 else "nanlens-captures"


@guard_step(checkpoint=checkpoint, capture_dir=CAPTURE_DIR)
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        row_sum = tf.reduce_sum(x, axis=1, keepdims=True)
        shares = x / row_sum  # ORIGIN
        prediction = model(shares, training=True)
        loss = tf.reduce_mean(tf.square(prediction - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    return loss


def make_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.uniform(0.1, 1.0, size=(64, 4)).astype("float32")
    x[50] = 0.0  # a row of zeros in the 4th batch of 16: its sum is 0
    y = rng.normal(size=(64, 1)).astype("float32")
    return x, y


if __name__ == "__main__":
    x, y = make_data()
    try:
        for start in range(0, 64, 16):
            train_step(tf.constant(x[start:start + 16]), tf.constant(y[start:start + 16]))
    except NonFiniteStepError as error:
        print(error, file=sys.stderr)
