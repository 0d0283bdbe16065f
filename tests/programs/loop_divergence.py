"""A custom training loop whose run diverges: a linear regression on unscaled features (values up to 40), trained
by SGD with momentum at a learning rate far too high for them. Every op is correct; the loss grows step after step
until it overflows float32. Used by tests/test_guard_window.py (the window of a guard_step run).

Usage: loop_divergence.py CAPTURE_DIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NonFiniteStepError, guard_step

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.uniform(5.0, 40.0, size=(2048, 6)).astype("float32")
y = (x @ rng.normal(size=(6, 1)) + 10.0).astype("float32")

model = keras.Sequential([keras.Input(shape=(6,)), keras.layers.Dense(16), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(learning_rate=3e-4, momentum=0.9)  # CHANGE
ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)


@guard_step(checkpoint=ckpt, capture_dir=sys.argv[1])
@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


try:
    for _ in range(10):
        for xb, yb in dataset:
            train_step(xb, yb)
    print("training stayed finite")
except NonFiniteStepError as error:
    print(error, file=sys.stderr)
    print("stopped by guard_step")
