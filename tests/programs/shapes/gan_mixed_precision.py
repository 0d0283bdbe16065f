"""A small GAN under mixed precision, written the way keras.io's DCGAN is: a keras.Model subclass with its own
compile(d_optimizer, g_optimizer, ...) and train_step, two LossScaleOptimizers, trained at module level (seeded).
The discriminator's loss on real samples is written by hand as -log(sigmoid(logits)) in the layers' float16 (the
other terms stably, with softplus): once it rejects a real sample with a very negative logit, the sigmoid rounds to
exactly 0 in float16 and log(0) = -inf (`precision`: float32 would not round it).

Under the mixed_float16 policy ``super().compile()`` wraps its default RMSprop in a LossScaleOptimizer that is
also named "loss_scale_optimizer", like the user's first one: both share variable paths.
"""
import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(7)

latent = 16
generator = keras.Sequential(
    [keras.Input((latent,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(32)]
)
discriminator = keras.Sequential(
    [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
)


class GAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim, **kwargs):
        super().__init__(**kwargs)
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.seed = keras.random.SeedGenerator(1337)

    def compile(self, d_optimizer, g_optimizer):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer

    def train_step(self, real):
        batch = tf.shape(real)[0]
        z = keras.random.normal((batch, self.latent_dim), seed=self.seed)
        with tf.GradientTape() as tape:
            fake = self.generator(z)
            real_logits = self.discriminator(real)
            fake_logits = self.discriminator(fake)
            real_term = -tf.math.log(tf.sigmoid(real_logits))  # ORIGIN
            fake_term = tf.math.softplus(fake_logits)  # -log(1 - sigmoid(x)), written stably
            d_loss = tf.reduce_mean(real_term + fake_term)
            scaled = self.d_optimizer.scale_loss(d_loss)
        grads = tape.gradient(scaled, self.discriminator.trainable_weights)
        self.d_optimizer.apply(grads, self.discriminator.trainable_weights)
        with tf.GradientTape() as tape:
            fake_logits = self.discriminator(self.generator(z))
            g_loss = tf.reduce_mean(tf.math.softplus(-fake_logits))  # -log(sigmoid(x)), written stably
            scaled = self.g_optimizer.scale_loss(g_loss)
        grads = tape.gradient(scaled, self.generator.trainable_weights)
        self.g_optimizer.apply(grads, self.generator.trainable_weights)
        return {"d_loss": d_loss, "g_loss": g_loss}


rng = np.random.default_rng(0)
data = (rng.standard_normal((2048, 32)) * 3 + 1).astype("float32")
gan = GAN(discriminator, generator, latent)
gan.compile(
    keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(5e-3)),
    keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(5e-3)),
)
gan.fit(data, batch_size=64, epochs=10, callbacks=[NanGuard("captures")], verbose=2)
