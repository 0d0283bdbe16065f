"""Two networks, each with its own guarded step, called in turn every iteration (a GAN's train_g before its
train_d, or an encoder's and a probe's): the second one fails."""

import numpy as np
import tensorflow as tf

from pyadapter import guard_step

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x[:, :1] > 0).astype("float32")

encoder = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(8)])
probe = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(1, activation="sigmoid")])
encoder_opt = tf.keras.optimizers.SGD(0.01)
probe_opt = tf.keras.optimizers.SGD(5.0)


@guard_step(capture_dir="captures", model=encoder, optimizer=encoder_opt)
@tf.function
def train_encoder(features):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(encoder(features) - features))
    encoder_opt.apply_gradients(zip(tape.gradient(loss, encoder.trainable_variables), encoder.trainable_variables))
    return loss


@guard_step(capture_dir="captures", model=probe, optimizer=probe_opt)
@tf.function
def train_probe(features, labels):
    with tf.GradientTape() as tape:
        p = probe(features)
        loss = -tf.reduce_mean(labels * tf.math.log(p) + (1 - labels) * tf.math.log(1 - p))  # ORIGIN
    probe_opt.apply_gradients(zip(tape.gradient(loss, probe.trainable_variables), probe.trainable_variables))
    return loss


for step in range(200):
    batch = slice((step * 32) % 256, (step * 32) % 256 + 32)
    train_encoder(x[batch])
    train_probe(x[batch] * 50.0, y[batch])
