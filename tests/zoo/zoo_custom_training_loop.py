"""Zoo: a custom training loop with guard_step (cosine similarity of a zero vector).

The model learns item embeddings that should point the same way as given target vectors, with a cosine
similarity written by hand: dot / (|a| |b|). Items that never had interactions have an all-zero target vector:
|b| = 0 and 0 / 0 is NaN.
Fix: ``tf.math.l2_normalize`` both vectors (it adds an epsilon), or divide by ``tf.maximum(|a| |b|, eps)``.
"""
# CAUSE: op: a wrong op on finite, in-range inputs

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NonFiniteStepError, guard_step

FEATURES = 8
EMBED = 4

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(EMBED)])
optimizer = keras.optimizers.Adam(1e-3)
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, FEATURES)).astype("float32")
    targets = rng.normal(size=(256, EMBED)).astype("float32")
    targets[77] = 0.0  # an item with no interactions
    return x, targets


def cosine_loss(targets: tf.Tensor, embeddings: tf.Tensor) -> tf.Tensor:
    cos = tf.reduce_sum(targets * embeddings, axis=-1) / (tf.norm(targets, axis=-1) * tf.norm(embeddings, axis=-1))  # ORIGIN: |b| = 0 gives 0 / 0
    return tf.reduce_mean(1.0 - cos)


@guard_step(checkpoint=checkpoint, capture_dir=os.environ.get("NANLENS_CAPTURE_DIR", "captures"))
@tf.function
def train_step(xb: tf.Tensor, tb: tf.Tensor) -> tf.Tensor:
    with tf.GradientTape() as tape:
        loss = cosine_loss(tb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def main() -> int:
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
