"""A GAN on heights in centimetres (unscaled), trained by two guarded steps as a custom loop writes it: the
discriminator's step is guarded with ``model=D`` and reads the generator too (``G(z)``), which it does not train.
D's sigmoid saturates and ``log(1 - d_fake)`` is -inf after a few hundred steps.

Run: python replay_loop_gan_two_steps.py CAPTURE_DIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NonFiniteStepError, guard_step

keras.utils.set_random_seed(0)
CAPTURE_DIR = sys.argv[1] if len(sys.argv) > 1 else "captures"
G = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
D = keras.Sequential(
    [keras.Input((1,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1, activation="sigmoid")]
)
g_opt = keras.optimizers.Adam(1e-3)
d_opt = keras.optimizers.Adam(1e-2)


@guard_step(capture_dir=CAPTURE_DIR, model=D, optimizer=d_opt)
@tf.function
def train_d(x_real, z):
    with tf.GradientTape() as tape:
        d_real = D(x_real, training=True)
        d_fake = D(G(z, training=True), training=True)
        loss = -tf.reduce_mean(tf.math.log(d_real) + tf.math.log(1.0 - d_fake))  # ORIGIN
    grads = tape.gradient(loss, D.trainable_variables)
    d_opt.apply_gradients(zip(grads, D.trainable_variables))
    return loss


@guard_step(capture_dir=CAPTURE_DIR, model=G, optimizer=g_opt)
@tf.function
def train_g(z):
    with tf.GradientTape() as tape:
        loss = -tf.reduce_mean(tf.math.log(D(G(z, training=True), training=True)))
    grads = tape.gradient(loss, G.trainable_variables)
    g_opt.apply_gradients(zip(grads, G.trainable_variables))
    return loss


rng = np.random.default_rng(0)
try:
    for step in range(3000):
        train_d(rng.normal(170.0, 8.0, size=(64, 1)).astype("float32"), rng.normal(size=(64, 4)).astype("float32"))
        train_g(rng.normal(size=(64, 4)).astype("float32"))
except NonFiniteStepError as stop:
    print(stop)
