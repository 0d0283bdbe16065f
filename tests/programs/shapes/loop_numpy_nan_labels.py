"""A custom loop fed from NumPy, the step guarded with guard_step over a tf.function: at step 3 the labels are
rescaled by a statistic that is 0 for that batch, so they arrive NaN. The step carries the NaN; it makes none."""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import guard_step

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.01)


@guard_step(capture_dir="captures", model=model, optimizer=optimizer)
@tf.function
def train_step(features, labels):
    with tf.GradientTape() as tape:
        target = labels * 2.0
        loss = tf.reduce_mean((model(features) - target) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


rng = np.random.default_rng(0)
for step in range(10):
    features = rng.normal(size=(8, 4)).astype("float32")
    labels = rng.normal(size=(8, 1)).astype("float32")
    scale = 0.0 if step == 3 else 1.0
    labels = labels * scale / scale
    train_step(features, labels)
