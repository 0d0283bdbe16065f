"""Zoo: a GAN that overrides train_step with two optimizers, as in keras-io's "GAN overriding train_step".

``class GAN(keras.Model)`` takes its own ``compile(d_optimizer, g_optimizer, loss_fn)`` (calling
``super().compile()``) and applies the discriminator's and the generator's updates in one ``train_step``. As in
the example, fake samples are labelled 1 and real ones 0 (plus a little label noise). The discriminator ends in a
sigmoid and ``loss_fn`` is a binary cross-entropy written out by hand. The discriminator learns faster than the
generator (two time-scale learning rates) and soon tells the fakes apart with certainty: its sigmoid rounds to
exactly 1.0 in float32 for a fake (a logit past ~17), and log(1 - p) = log(0) = -inf, multiplied by the
zero-or-slightly-negative weight (1 - label): NaN or inf in the discriminator's loss.
Fix: have the discriminator return logits and use ``keras.losses.BinaryCrossentropy(from_logits=True)``, or
clip p into [eps, 1 - eps].

The script trains at module level.
"""
# CAUSE: op: a wrong op on finite, in-range inputs

import os
import sys

import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

from pyadapter import NanGuard

keras.utils.set_random_seed(1337)

SIGNAL_LENGTH = 16
latent_dim = 8

discriminator = keras.Sequential(
    [
        keras.Input(shape=(SIGNAL_LENGTH,)),
        layers.Dense(64),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Dense(64),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Dense(1, activation="sigmoid"),
    ],
    name="discriminator",
)

generator = keras.Sequential(
    [
        keras.Input(shape=(latent_dim,)),
        layers.Dense(64),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Dense(SIGNAL_LENGTH, activation="tanh"),
    ],
    name="generator",
)


class GAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.seed_generator = keras.random.SeedGenerator(1337)

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")

    @property
    def metrics(self):
        return [self.d_loss_tracker, self.g_loss_tracker]

    def train_step(self, real_signals):
        # Sample random points in the latent space
        batch_size = ops.shape(real_signals)[0]
        random_latent_vectors = keras.random.normal(shape=(batch_size, self.latent_dim), seed=self.seed_generator)

        # Decode them to fake signals
        generated_signals = self.generator(random_latent_vectors)

        # Combine them with real signals
        combined_signals = ops.concatenate([generated_signals, real_signals], axis=0)

        # Assemble labels discriminating real from fake signals
        labels = ops.concatenate([ops.ones((batch_size, 1)), ops.zeros((batch_size, 1))], axis=0)
        # Add random noise to the labels - important trick!
        labels += 0.05 * tf.random.uniform(tf.shape(labels))

        # Train the discriminator
        with tf.GradientTape() as tape:
            predictions = self.discriminator(combined_signals)
            d_loss = self.loss_fn(labels, predictions)
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))

        # Sample random points in the latent space
        random_latent_vectors = keras.random.normal(shape=(batch_size, self.latent_dim), seed=self.seed_generator)

        # Assemble labels that say "all real signals"
        misleading_labels = ops.zeros((batch_size, 1))

        # Train the generator (note that we should *not* update the weights of the discriminator)!
        with tf.GradientTape() as tape:
            predictions = self.discriminator(self.generator(random_latent_vectors))
            g_loss = self.loss_fn(misleading_labels, predictions)
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))

        # Update metrics
        self.d_loss_tracker.update_state(d_loss)
        self.g_loss_tracker.update_state(g_loss)
        return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}


def binary_crossentropy(labels, probs):
    return -tf.reduce_mean(labels * tf.math.log(probs) + (1.0 - labels) * tf.math.log(1.0 - probs))  # ORIGIN: the discriminator's sigmoid rounds to 1.0 on a fake: log(1 - 1) = -inf


# Real signals: sine waves with random frequency and phase, in [-1, 1] like the generator's tanh.
rng = np.random.default_rng(0)
t = np.linspace(0.0, 1.0, SIGNAL_LENGTH, dtype="float32")
frequency = rng.uniform(1.0, 3.0, size=(4096, 1)).astype("float32")
phase = rng.uniform(0.0, 2 * np.pi, size=(4096, 1)).astype("float32")
real_signals = np.sin(2 * np.pi * frequency * t + phase).astype("float32")

dataset = tf.data.Dataset.from_tensor_slices(real_signals).shuffle(4096, seed=0).batch(64)

gan = GAN(discriminator=discriminator, generator=generator, latent_dim=latent_dim)
gan.compile(
    d_optimizer=keras.optimizers.Adam(learning_rate=0.002),
    g_optimizer=keras.optimizers.Adam(learning_rate=0.0002),
    loss_fn=binary_crossentropy,
)
history = gan.fit(dataset, epochs=20, verbose=0, callbacks=[NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))])

losses = history.history.get("d_loss", []) + history.history.get("g_loss", [])
weights_finite = all(np.all(np.isfinite(w)) for w in gan.get_weights())
non_finite = bool(gan.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
sys.exit(1 if non_finite else 0)
