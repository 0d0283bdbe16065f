"""Multi-task regression in a custom loop: a shared backbone and a task head are two models trained by one
optimizer, but the checkpoint (and so the guard) names only the backbone. Inputs are standardized per batch,
and one feature is constant in the 3rd batch, so its standard deviation is 0.

Run: python replay_loop_two_models.py CAPTURE_DIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NonFiniteStepError, guard_step

keras.utils.set_random_seed(4)
backbone = keras.Sequential([keras.Input((5,)), keras.layers.Dense(16, activation="tanh")], name="backbone")
head = keras.Sequential([keras.Input((16,)), keras.layers.Dense(1)], name="task_head")
optimizer = keras.optimizers.RMSprop(1e-3)
checkpoint = tf.train.Checkpoint(model=backbone, optimizer=optimizer)
CAPTURE_DIR = sys.argv[1] if len(sys.argv) > 1 else "nanlens-captures"


@guard_step(checkpoint=checkpoint, capture_dir=CAPTURE_DIR)
@tf.function
def train_step(x, y):
    mean, variance = tf.nn.moments(x, axes=[0])
    x = (x - mean) / tf.sqrt(variance)  # ORIGIN
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(head(backbone(x, training=True)) - y))
    variables = backbone.trainable_variables + head.trainable_variables
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss


def batches():
    rng = np.random.default_rng(11)
    x = rng.normal(size=(96, 5)).astype("float32")
    x[48:72, 2] = 1.5  # a sensor stuck at one value for a whole batch
    y = (x @ rng.normal(size=(5, 1))).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(24)


if __name__ == "__main__":
    try:
        for epoch in range(3):
            for x, y in batches():
                train_step(x, y)
    except NonFiniteStepError as error:
        print(error, file=sys.stderr)
