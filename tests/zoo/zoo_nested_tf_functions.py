"""Zoo: nested tf.functions (atanh of actions clipped to +-1).

Behaviour cloning of a tanh-squashed Gaussian policy. The training step (a tf.function) calls ``log_prob`` (a
tf.function), which calls ``unsquash`` (a tf.function) to map recorded actions back through atanh. The
environment clipped some recorded actions to exactly +-1.0, and atanh(1) is inf.
Fix: clip the actions into (-1 + eps, 1 - eps) before atanh.
"""
# CAUSE: op: a wrong op on finite, in-range inputs

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NonFiniteStepError, guard_step

OBS = 6
ACT = 2

keras.utils.set_random_seed(0)
policy = keras.Sequential([keras.Input(shape=(OBS,)), keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(2 * ACT)])
optimizer = keras.optimizers.Adam(1e-3)
checkpoint = tf.train.Checkpoint(policy=policy, optimizer=optimizer)


@tf.function
def unsquash(actions: tf.Tensor) -> tf.Tensor:
    return tf.math.atanh(actions)  # ORIGIN: atanh(+-1) = +-inf for actions clipped to the bounds


@tf.function
def log_prob(actions: tf.Tensor, mean: tf.Tensor, log_std: tf.Tensor) -> tf.Tensor:
    u = unsquash(actions)
    z = (u - mean) * tf.exp(-log_std)
    gaussian = -0.5 * tf.square(z) - log_std - 0.5 * np.log(2.0 * np.pi)
    return tf.reduce_sum(gaussian - tf.math.log(1.0 - tf.square(actions) + 1e-6), axis=-1)


@guard_step(checkpoint=checkpoint, capture_dir=os.environ.get("NANLENS_CAPTURE_DIR", "captures"))
@tf.function
def train_step(ob: tf.Tensor, act: tf.Tensor) -> tf.Tensor:
    with tf.GradientTape() as tape:
        mean, log_std = tf.split(policy(ob, training=True), 2, axis=-1)
        loss = -tf.reduce_mean(log_prob(act, mean, tf.clip_by_value(log_std, -5.0, 2.0)))
    grads = tape.gradient(loss, policy.trainable_variables)
    optimizer.apply_gradients(zip(grads, policy.trainable_variables))
    return loss


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(256, OBS)).astype("float32")
    actions = np.tanh(obs[:, :ACT] * 1.5 + 0.1 * rng.normal(size=(256, ACT)))
    actions[40:48, 0] = 1.0  # the environment clipped these to its action bound
    return obs, actions.astype("float32")


def main() -> int:
    obs, actions = make_data()
    dataset = tf.data.Dataset.from_tensor_slices((obs, actions)).batch(32)
    try:
        for _ in range(2):
            for ob, act in dataset:
                train_step(ob, act)
    except NonFiniteStepError as error:
        print(f"zoo: training went non-finite: {error}")
        return 1
    print("zoo: training stayed finite")
    return 0


if __name__ == "__main__":
    sys.exit(main())
