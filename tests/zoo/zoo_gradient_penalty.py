"""Zoo: a WGAN-GP gradient penalty on a zero gradient (second-order backward NaN).

The critic's gradient penalty is (||d critic / d x||_2 - 1)^2, with the norm taken by ``tf.norm``. For inputs
where every ReLU unit of the critic is off, d critic / d x is exactly 0; the norm's forward value 0 is fine, but
differentiating the norm (a sqrt) at 0 gives inf * 0 = NaN in the critic's weight gradients.
Fix: sqrt(sum(g^2) + 1e-12) instead of ``tf.norm``.
"""
# CAUSE: op: a wrong op on finite, in-range inputs

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NonFiniteStepError, guard_step

FEATURES = 4

keras.utils.set_random_seed(0)
critic = keras.Sequential(
    [
        keras.Input(shape=(FEATURES,)),
        keras.layers.Dense(8, activation="relu", bias_initializer=keras.initializers.Constant(-1.0)),
        keras.layers.Dense(1),
    ]
)
optimizer = keras.optimizers.Adam(1e-3)
checkpoint = tf.train.Checkpoint(critic=critic, optimizer=optimizer)


def gradient_penalty(real: tf.Tensor, fake: tf.Tensor, alpha: tf.Tensor) -> tf.Tensor:
    mixed = alpha * real + (1.0 - alpha) * fake
    with tf.GradientTape() as inner:
        inner.watch(mixed)
        scores = critic(mixed, training=True)
    grads = inner.gradient(scores, mixed)
    norms = tf.norm(grads, axis=-1)  # ORIGIN: the norm's gradient at a zero vector is NaN; use sqrt(sum(g^2) + eps)
    return tf.reduce_mean(tf.square(norms - 1.0))


@guard_step(checkpoint=checkpoint, capture_dir=os.environ.get("NANLENS_CAPTURE_DIR", "captures"))
@tf.function
def train_step(real: tf.Tensor, fake: tf.Tensor, alpha: tf.Tensor) -> tf.Tensor:
    with tf.GradientTape() as tape:
        wasserstein = tf.reduce_mean(critic(fake, training=True)) - tf.reduce_mean(critic(real, training=True))
        loss = wasserstein + 10.0 * gradient_penalty(real, fake, alpha)
    grads = tape.gradient(loss, critic.trainable_variables)
    optimizer.apply_gradients(zip(grads, critic.trainable_variables))
    return loss


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    real = rng.normal(loc=1.0, scale=0.5, size=(256, FEATURES)).astype("float32")
    fake = rng.normal(loc=-1.0, scale=0.5, size=(256, FEATURES)).astype("float32")
    alpha = rng.uniform(size=(256, 1)).astype("float32")
    return real, fake, alpha


def main() -> int:
    real, fake, alpha = make_data()
    dataset = tf.data.Dataset.from_tensor_slices((real, fake, alpha)).batch(32)
    try:
        for _ in range(2):
            for rb, fb, ab in dataset:
                train_step(rb, fb, ab)
    except NonFiniteStepError as error:
        print(f"zoo: training went non-finite: {error}")
        return 1
    print("zoo: training stayed finite")
    return 0


if __name__ == "__main__":
    sys.exit(main())
