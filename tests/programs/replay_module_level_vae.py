"""Shaped like keras-io's VAE example: functional encoder/decoder, a `VAE(encoder, decoder, beta=...)` subclass
with its own `train_step`, and training at module level (no `if __name__ == "__main__":`). A hand-written
Bernoulli log-likelihood takes `log(1 - recon)` where the decoder's sigmoid saturates at exactly 1.

Run: python replay_module_level_vae.py CAPTURE_DIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf
from keras import layers

from pyadapter import NanGuard

keras.utils.set_random_seed(0)
latent_dim = 2


class Sampling(layers.Layer):
    """Uses (z_mean, z_log_var) to sample z, the vector encoding a digit."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs):
        z_mean, z_log_var = inputs
        epsilon = keras.random.normal(shape=tf.shape(z_mean), seed=self.seed_generator)
        return z_mean + tf.exp(0.5 * z_log_var) * epsilon


enc_in = keras.Input(shape=(8,))
h = layers.Dense(16, activation="relu")(enc_in)
z_mean = layers.Dense(latent_dim)(h)
z_log_var = layers.Dense(latent_dim)(h)
z = Sampling()([z_mean, z_log_var])
encoder = keras.Model(enc_in, [z_mean, z_log_var, z])
dec_in = keras.Input(shape=(latent_dim,))
decoder = keras.Model(dec_in, layers.Dense(8, activation="sigmoid")(layers.Dense(16, activation="relu")(dec_in)))


class VAE(keras.Model):
    def __init__(self, encoder, decoder, beta=1.0, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.decoder = decoder
        self.beta = beta
        self.loss_tracker = keras.metrics.Mean(name="loss")

    @property
    def metrics(self):
        return [self.loss_tracker]

    def train_step(self, data):
        with tf.GradientTape() as tape:
            z_mean, z_log_var, z = self.encoder(data)
            recon = self.decoder(z)
            nll = -tf.reduce_mean(data * tf.math.log(recon) + (1 - data) * tf.math.log(1 - recon))  # ORIGIN
            kl = -0.5 * tf.reduce_mean(1 + z_log_var - tf.square(z_mean) - tf.exp(z_log_var))
            loss = nll + self.beta * kl
        grads = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}


x = np.random.default_rng(0).uniform(size=(256, 8)).astype("float32") * 40.0
vae = VAE(encoder, decoder, beta=0.5)
vae.compile(optimizer=keras.optimizers.Adam(0.01))
vae.fit(x, epochs=3, batch_size=32, shuffle=False, verbose=0, callbacks=[NanGuard(sys.argv[1])])
