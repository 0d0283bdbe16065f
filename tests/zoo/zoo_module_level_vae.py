"""Zoo: a variational autoencoder in the style of keras-io's VAE example, trained at module level.

Encoder and decoder are functional models, a ``Sampling`` layer draws z with the reparameterization trick, and
``class VAE(keras.Model)`` has its own ``train_step`` with metric trackers. The reconstruction term is the
Bernoulli log-likelihood written out by hand. The "sketches" are dark strokes on white paper, so the border
pixels are 1.0 in every image: the decoder keeps pushing their logits up until the sigmoid rounds to exactly 1.0
in float32 (a logit past ~17). Then log(1 - p) = log(0) = -inf and (1 - x) * -inf = 0 * -inf = NaN.
Fix: ``keras.losses.binary_crossentropy(data, reconstruction)`` (it clips), or clip p into [eps, 1 - eps], or
have the decoder return logits and use ``tf.nn.sigmoid_cross_entropy_with_logits``.

The script trains at module level, as the keras-io example does: no ``__main__`` guard.
"""
# CAUSE: op: a wrong op on finite, in-range inputs

import os
import sys

import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

from pyadapter import NanGuard

keras.utils.set_random_seed(42)

IMAGE_SIZE = 8
latent_dim = 2


class Sampling(layers.Layer):
    """Uses (z_mean, z_log_var) to sample z, the vector encoding a sketch."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs):
        z_mean, z_log_var = inputs
        batch = ops.shape(z_mean)[0]
        dim = ops.shape(z_mean)[1]
        epsilon = keras.random.normal(shape=(batch, dim), seed=self.seed_generator)
        return z_mean + ops.exp(0.5 * z_log_var) * epsilon


# Encoder
encoder_inputs = keras.Input(shape=(IMAGE_SIZE, IMAGE_SIZE, 1))
x = layers.Flatten()(encoder_inputs)
x = layers.Dense(32, activation="relu")(x)
z_mean = layers.Dense(latent_dim, name="z_mean")(x)
z_log_var = layers.Dense(latent_dim, name="z_log_var")(x)
z = Sampling()([z_mean, z_log_var])
encoder = keras.Model(encoder_inputs, [z_mean, z_log_var, z], name="encoder")

# Decoder
latent_inputs = keras.Input(shape=(latent_dim,))
x = layers.Dense(32, activation="relu")(latent_inputs)
x = layers.Dense(IMAGE_SIZE * IMAGE_SIZE, activation="sigmoid")(x)
decoder_outputs = layers.Reshape((IMAGE_SIZE, IMAGE_SIZE, 1))(x)
decoder = keras.Model(latent_inputs, decoder_outputs, name="decoder")


class VAE(keras.Model):
    def __init__(self, encoder, decoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.decoder = decoder
        self.total_loss_tracker = keras.metrics.Mean(name="total_loss")
        self.reconstruction_loss_tracker = keras.metrics.Mean(name="reconstruction_loss")
        self.kl_loss_tracker = keras.metrics.Mean(name="kl_loss")

    @property
    def metrics(self):
        return [self.total_loss_tracker, self.reconstruction_loss_tracker, self.kl_loss_tracker]

    def train_step(self, data):
        with tf.GradientTape() as tape:
            z_mean, z_log_var, z = self.encoder(data)
            reconstruction = self.decoder(z)
            # Bernoulli log-likelihood of every pixel
            log_likelihood = data * tf.math.log(reconstruction) + (1 - data) * tf.math.log(1 - reconstruction)  # ORIGIN: p rounds to 1.0 on the always-white border: log(1 - p) = -inf, (1 - x) * -inf = NaN
            reconstruction_loss = -ops.mean(ops.sum(log_likelihood, axis=(1, 2, 3)))
            kl_loss = -0.5 * (1 + z_log_var - ops.square(z_mean) - ops.exp(z_log_var))
            kl_loss = ops.mean(ops.sum(kl_loss, axis=1))
            total_loss = reconstruction_loss + kl_loss
        grads = tape.gradient(total_loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        self.total_loss_tracker.update_state(total_loss)
        self.reconstruction_loss_tracker.update_state(reconstruction_loss)
        self.kl_loss_tracker.update_state(kl_loss)
        return {
            "loss": self.total_loss_tracker.result(),
            "reconstruction_loss": self.reconstruction_loss_tracker.result(),
            "kl_loss": self.kl_loss_tracker.result(),
        }


# Sketches: white paper (1.0) with one dark horizontal and one dark vertical stroke inside the border.
rng = np.random.default_rng(0)
sketches = np.ones((2048, IMAGE_SIZE, IMAGE_SIZE, 1), dtype="float32")
rows = rng.integers(1, IMAGE_SIZE - 1, size=len(sketches))
cols = rng.integers(1, IMAGE_SIZE - 1, size=len(sketches))
for i, (r, c) in enumerate(zip(rows, cols)):
    sketches[i, r, 1:-1, 0] = 0.0
    sketches[i, 1:-1, c, 0] = 0.0

vae = VAE(encoder, decoder)
vae.compile(optimizer=keras.optimizers.Adam())
history = vae.fit(
    sketches, epochs=50, batch_size=64, verbose=0,
    callbacks=[NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))],
)

losses = history.history.get("loss", [])
weights_finite = all(np.all(np.isfinite(w)) for w in vae.get_weights())
non_finite = bool(vae.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
sys.exit(1 if non_finite else 0)
