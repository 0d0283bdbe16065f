"""WGAN-GP as in the keras.io example (https://keras.io/examples/generative/wgan_gp/), on 8x8 toy images.

The gradient penalty takes the norm of the critic's input gradient as sqrt(sum(g^2)). A critic whose ReLUs are
all off for an interpolated image has g = 0 there: sqrt's derivative at 0 is inf, times 0 is NaN.
Fix: sqrt(sum(g^2) + 1e-12).
"""

import keras
import numpy as np
import tensorflow as tf
from keras import layers

from pyadapter import NanGuard

IMG_SHAPE = (8, 8, 1)
noise_dim = 16
BATCH_SIZE = 32


def get_discriminator_model():
    img_input = layers.Input(shape=IMG_SHAPE)
    x = layers.Flatten()(img_input)
    x = layers.Dense(64, bias_initializer=keras.initializers.Constant(-0.5))(x)
    x = layers.ReLU()(x)
    x = layers.Dense(1)(x)
    return keras.models.Model(img_input, x, name="discriminator")


def get_generator_model():
    noise = layers.Input(shape=(noise_dim,))
    x = layers.Dense(64, activation="tanh")(noise)
    x = layers.Reshape(IMG_SHAPE)(x)
    return keras.models.Model(noise, x, name="generator")


class WGAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim, discriminator_extra_steps=3, gp_weight=10.0):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.d_steps = discriminator_extra_steps
        self.gp_weight = gp_weight

    def compile(self, d_optimizer, g_optimizer, d_loss_fn, g_loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.d_loss_fn = d_loss_fn
        self.g_loss_fn = g_loss_fn

    def gradient_penalty(self, batch_size, real_images, fake_images):
        alpha = tf.random.uniform([batch_size, 1, 1, 1], 0.0, 1.0)
        diff = fake_images - real_images
        interpolated = real_images + alpha * diff

        with tf.GradientTape() as gp_tape:
            gp_tape.watch(interpolated)
            pred = self.discriminator(interpolated, training=True)

        grads = gp_tape.gradient(pred, [interpolated])[0]
        norm = tf.sqrt(tf.reduce_sum(tf.square(grads), axis=[1, 2, 3]))  # ORIGIN
        gp = tf.reduce_mean((norm - 1.0) ** 2)
        return gp

    def train_step(self, real_images):
        if isinstance(real_images, tuple):
            real_images = real_images[0]

        batch_size = tf.shape(real_images)[0]

        for i in range(self.d_steps):
            random_latent_vectors = tf.random.normal(shape=(batch_size, self.latent_dim))
            with tf.GradientTape() as tape:
                fake_images = self.generator(random_latent_vectors, training=True)
                fake_logits = self.discriminator(fake_images, training=True)
                real_logits = self.discriminator(real_images, training=True)
                d_cost = self.d_loss_fn(real_img=real_logits, fake_img=fake_logits)
                gp = self.gradient_penalty(batch_size, real_images, fake_images)
                d_loss = d_cost + gp * self.gp_weight

            d_gradient = tape.gradient(d_loss, self.discriminator.trainable_variables)
            self.d_optimizer.apply_gradients(zip(d_gradient, self.discriminator.trainable_variables))

        random_latent_vectors = tf.random.normal(shape=(batch_size, self.latent_dim))
        with tf.GradientTape() as tape:
            generated_images = self.generator(random_latent_vectors, training=True)
            gen_img_logits = self.discriminator(generated_images, training=True)
            g_loss = self.g_loss_fn(gen_img_logits)

        gen_gradient = tape.gradient(g_loss, self.generator.trainable_variables)
        self.g_optimizer.apply_gradients(zip(gen_gradient, self.generator.trainable_variables))
        return {"d_loss": d_loss, "g_loss": g_loss}


def discriminator_loss(real_img, fake_img):
    real_loss = tf.reduce_mean(real_img)
    fake_loss = tf.reduce_mean(fake_img)
    return fake_loss - real_loss


def generator_loss(fake_img):
    return -tf.reduce_mean(fake_img)


keras.utils.set_random_seed(3)
train_images = np.random.default_rng(3).uniform(-1, 1, size=(512,) + IMG_SHAPE).astype("float32")

d_model = get_discriminator_model()
g_model = get_generator_model()
generator_optimizer = keras.optimizers.Adam(learning_rate=0.0002, beta_1=0.5, beta_2=0.9)
discriminator_optimizer = keras.optimizers.Adam(learning_rate=0.0002, beta_1=0.5, beta_2=0.9)

wgan = WGAN(discriminator=d_model, generator=g_model, latent_dim=noise_dim, discriminator_extra_steps=3)
wgan.compile(
    d_optimizer=discriminator_optimizer,
    g_optimizer=generator_optimizer,
    g_loss_fn=generator_loss,
    d_loss_fn=discriminator_loss,
)
guard = NanGuard("captures")
wgan.fit(train_images, batch_size=BATCH_SIZE, epochs=3, verbose=0, callbacks=[guard])
print("failures:", [f.step for f in guard.failures])
print("d weights finite:", all(np.isfinite(w).all() for w in d_model.get_weights()))
print("g weights finite:", all(np.isfinite(w).all() for w in g_model.get_weights()))
