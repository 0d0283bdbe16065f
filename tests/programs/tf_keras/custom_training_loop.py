"""Keras 2 form of zoo_custom_training_loop: a tf.function step with GradientTape, guarded by guard_step; cosine
similarity with a zero target vector is 0 / 0."""

import os
import sys

import numpy as np
import tensorflow as tf

from pyadapter import NonFiniteStepError, guard_step

FEATURES = 8
EMBED = 4

tf.keras.utils.set_random_seed(0)
model = tf.keras.Sequential([
    tf.keras.layers.Dense(16, activation="tanh", input_shape=(FEATURES,)),
    tf.keras.layers.Dense(EMBED),
])
optimizer = tf.keras.optimizers.Adam(1e-3)
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)


def make_data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, FEATURES)).astype("float32")
    targets = rng.normal(size=(256, EMBED)).astype("float32")
    targets[77] = 0.0  # an item with no interactions
    return x, targets


def cosine_loss(targets, embeddings):
    cos = tf.reduce_sum(targets * embeddings, axis=-1) / (tf.norm(targets, axis=-1) * tf.norm(embeddings, axis=-1))  # ORIGIN: |b| = 0 gives 0 / 0
    return tf.reduce_mean(1.0 - cos)


@guard_step(checkpoint=checkpoint, capture_dir=os.environ.get("NANLENS_CAPTURE_DIR", "captures"))
@tf.function
def train_step(xb, tb):
    with tf.GradientTape() as tape:
        loss = cosine_loss(tb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def main():
    x, targets = make_data()
    dataset = tf.data.Dataset.from_tensor_slices((x, targets)).batch(32)
    try:
        for _ in range(2):
            for xb, tb in dataset:
                train_step(xb, tb)
    except NonFiniteStepError as error:
        print(f"zoo: training went non-finite: {error}")
        return 1
    print("zoo: training stayed finite")
    return 0


if __name__ == "__main__":
    sys.exit(main())
