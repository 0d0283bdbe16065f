"""A custom training loop written as many tutorials write it: everything inside a `train(epochs)` function called
at the bottom of the file (no `__main__` guard), the model built there, the step a closure over it guarded with
`guard_step(model=..., optimizer=...)`. A "relative error" divides by targets that are 0 in one batch.

Run: python replay_loop_in_function.py CAPTURE_DIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NonFiniteStepError, guard_step


def load_data():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(80, 6)).astype("float32")
    y = rng.uniform(1.0, 2.0, size=(80, 1)).astype("float32")
    y[48:64] = 0.0  # the 4th batch of 16 has zero targets
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(16)


def train(epochs):
    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(12, activation="tanh"), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)

    @guard_step(model=model, optimizer=optimizer, capture_dir=sys.argv[1])
    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            pred = model(x, training=True)
            loss = tf.reduce_mean(tf.abs(pred - y) / tf.abs(y))  # ORIGIN
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for _ in range(epochs):
        for x, y in load_data():
            step(x, y)


try:
    train(epochs=2)
except NonFiniteStepError as error:
    print(error, file=sys.stderr)
