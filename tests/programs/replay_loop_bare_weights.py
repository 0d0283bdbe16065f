"""A recurrent cell written by hand (bare tf.Variables and tf.scan, no Keras model) trained by a Keras optimizer in
a custom loop; the checkpoint holds the variables. The rate is far too high: the first update makes the weights
Inf from finite loss and gradients, which the guard's weight check catches.

Run: python replay_loop_bare_weights.py CAPTURE_DIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NonFiniteStepError, guard_step

CAPTURE_DIR = sys.argv[1] if len(sys.argv) > 1 else "nanlens-captures"

rng = np.random.default_rng(0)
w_x = tf.Variable(rng.normal(scale=0.3, size=(4, 16)).astype("float32"), name="w_x")
w_h = tf.Variable(rng.normal(scale=0.3, size=(16, 16)).astype("float32"), name="w_h")
w_o = tf.Variable(rng.normal(scale=0.3, size=(16, 1)).astype("float32"), name="w_o")
params = [w_x, w_h, w_o]
optimizer = keras.optimizers.SGD(learning_rate=3e38)
sequences = rng.normal(size=(64, 12, 4)).astype("float32")
targets = rng.normal(size=(64, 1)).astype("float32") * 50.0


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        steps = tf.transpose(x, [1, 0, 2])
        last = tf.scan(
            lambda h, x_t: tf.tanh(x_t @ w_x + h @ w_h), steps, initializer=tf.zeros([tf.shape(x)[0], 16])
        )
        loss = tf.reduce_mean(tf.square(last[-1] @ w_o - y))
    grads = tape.gradient(loss, params)
    optimizer.apply_gradients(zip(grads, params))  # ORIGIN
    return loss


train_step = guard_step(
    train_step, checkpoint=tf.train.Checkpoint(params=params, optimizer=optimizer), capture_dir=CAPTURE_DIR
)
try:
    for start in range(0, 64, 16):
        train_step(sequences[start : start + 16], targets[start : start + 16])
except NonFiniteStepError as failure:
    print(failure)
