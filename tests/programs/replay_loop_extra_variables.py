"""A siamese embedding trained with a contrastive loss in a custom GradientTape loop, written as a user writes it:
the guard is told about the encoder only, but the step also trains a projection head (a second model) and a
learned distance scale (a bare tf.Variable) with the same optimizer. One positive pair in the 5th batch is an
exact duplicate, so its Euclidean distance is sqrt(0): the loss stays finite, the gradient is NaN.

Run: python replay_loop_extra_variables.py CAPTURE_DIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NonFiniteStepError, guard_step

CAPTURE_DIR = sys.argv[1] if len(sys.argv) > 1 else "nanlens-captures"
MARGIN = 1.0

keras.utils.set_random_seed(3)
encoder = keras.Sequential(
    [keras.Input((10,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(8)], name="encoder"
)
head = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)], name="head")
log_scale = tf.Variable(0.0, name="log_scale")
optimizer = keras.optimizers.Adam(1e-2)

rng = np.random.default_rng(5)
a = rng.normal(size=(192, 10)).astype("float32")
same = rng.integers(0, 2, size=(192,)).astype("float32")
b = np.where(same[:, None] == 1, a + rng.normal(scale=0.1, size=a.shape), rng.normal(size=a.shape)).astype("float32")
b[135] = a[135]  # a duplicated image in batch 5 (rows 128..159): an exact positive pair
same[135] = 1.0
pairs = tf.data.Dataset.from_tensor_slices((a, b, same)).batch(32)


@guard_step(model=encoder, optimizer=optimizer, capture_dir=CAPTURE_DIR)
@tf.function
def train_step(x1, x2, is_same):
    with tf.GradientTape() as tape:
        z1 = head(encoder(x1, training=True))
        z2 = head(encoder(x2, training=True))
        distance = tf.sqrt(tf.reduce_sum(tf.square(z1 - z2), axis=1))  # ORIGIN
        scaled = distance * tf.exp(log_scale)
        loss = tf.reduce_mean(is_same * scaled + (1 - is_same) * tf.nn.relu(MARGIN - scaled))
    variables = encoder.trainable_variables + head.trainable_variables + [log_scale]
    grads = tape.gradient(loss, variables)
    optimizer.apply_gradients(zip(grads, variables))
    return loss


try:
    for epoch in range(2):
        for x1, x2, is_same in pairs:
            loss = train_step(x1, x2, is_same)
        print(f"epoch {epoch}: loss {float(loss):.4f}")
except NonFiniteStepError as error:
    print(error, file=sys.stderr)
