"""A GAN written the way the Keras-GAN examples are (github.com/eriklindernoren/Keras-GAN): two compiled models,
each trained with ``train_on_batch`` in the program's own loop at module level, no ``fit``. NanGuard has no
``callbacks=`` to go into here, so each guard is installed on its model the way Keras runs callbacks in a loop of
one's own: ``keras.callbacks.CallbackList([guard], model=...).on_train_begin()``.

The discriminator has ProGAN's minibatch standard-deviation feature, written without its epsilon. From iteration
30 the real images come from the half of the data with a blank border (-1 in the first 8 features of every image),
so those features do not vary over the batch: sqrt(0) is 0 on the way forward, and its derivative at 0 is
infinite, times 0 gives NaN in the gradient of the feature's gain.
Fix: tf.sqrt(... + 1e-8).
"""

import keras
import numpy as np
import tensorflow as tf
from keras import layers

from pyadapter import NanGuard


class MinibatchStdDev(layers.Layer):
    """ProGAN's minibatch standard deviation, as one more feature (with a trainable gain on the inputs)."""

    def build(self, input_shape):
        self.gain = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="gain")

    def call(self, x):
        x = x * self.gain
        mean = tf.reduce_mean(x, axis=0, keepdims=True)
        std = tf.sqrt(tf.reduce_mean(tf.square(x - mean), axis=0))  # ORIGIN
        feature = tf.reduce_mean(std) * tf.ones_like(x[:, :1])
        return tf.concat([x, feature], axis=-1)


keras.utils.set_random_seed(7)
latent_dim = 16
rng = np.random.default_rng(0)
X_train = np.tanh(rng.normal(size=(2048, 64))).astype("float32")
X_train[1024:, :8] = -1.0  # scans with a blank border


def build_generator():
    return keras.Sequential(
        [
            keras.Input((latent_dim,)),
            layers.Dense(64, activation="relu"),
            layers.Dense(64, activation="tanh"),
        ],
        name="generator",
    )


def build_discriminator():
    return keras.Sequential(
        [
            keras.Input((64,)),
            MinibatchStdDev(),
            layers.Dense(32, activation="relu"),
            layers.Dense(1, activation="sigmoid"),
        ],
        name="discriminator",
    )


discriminator = build_discriminator()
discriminator.compile(loss="binary_crossentropy", optimizer=keras.optimizers.Adam(2e-4, 0.5))
generator = build_generator()
z = keras.Input((latent_dim,))
discriminator.trainable = False
combined = keras.Model(z, discriminator(generator(z)), name="combined")
combined.compile(loss="binary_crossentropy", optimizer=keras.optimizers.Adam(2e-4, 0.5))

d_guard, g_guard = NanGuard("captures"), NanGuard("captures")
keras.callbacks.CallbackList([d_guard], model=discriminator).on_train_begin()
keras.callbacks.CallbackList([g_guard], model=combined).on_train_begin()

batch_size = 32
valid, fake = np.ones((batch_size, 1)), np.zeros((batch_size, 1))
for iteration in range(60):
    start = iteration * batch_size if iteration < 30 else 1024 + (iteration - 30) * batch_size
    imgs = X_train[start : start + batch_size]
    noise = rng.normal(0, 1, (batch_size, latent_dim))
    gen_imgs = generator.predict(noise, verbose=0)
    # Keras 3 reads `trainable` when a model's train step is first traced: the discriminator trains in its own
    # step and is frozen in the combined model's.
    discriminator.trainable = True
    d_loss_real = discriminator.train_on_batch(imgs, valid)
    d_loss_fake = discriminator.train_on_batch(gen_imgs, fake)
    discriminator.trainable = False
    g_loss = combined.train_on_batch(noise, valid)
    if discriminator.stop_training or combined.stop_training:
        break
    print(f"{iteration} [D loss: {0.5 * (d_loss_real + d_loss_fake):.4f}] [G loss: {g_loss:.4f}]")
print("iterations run:", iteration + 1)
print("discriminator weights finite:", all(np.isfinite(w).all() for w in discriminator.get_weights()))
