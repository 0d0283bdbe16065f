"""An older GAN script (the Keras-GAN examples' shape): a discriminator and a combined model (the generator and the
frozen discriminator), each compiled and trained with ``train_on_batch`` in the program's own loop, a guard on each
through ``keras.callbacks.CallbackList``. Written by a helper trying NaN Lens as a user.

The discriminator's SGD runs at 5.0 (a typo for 5e-4): its own steps stay finite a while, but each one throws the
discriminator's weights further out, and the combined model's step, through that frozen discriminator, overflows
first. The generator's weights stood still: the change is the discriminator's optimizer.
"""

import keras
import numpy as np
from keras import layers

from pyadapter import NanGuard

keras.utils.set_random_seed(3)
latent_dim = 8
rng = np.random.default_rng(1)
X_train = (rng.normal(size=(4096, 32)) * 0.5 + 1.0).astype("float32")

generator = keras.Sequential(
    [keras.Input((latent_dim,)), layers.Dense(32, activation="relu"), layers.Dense(32)], name="generator"
)
discriminator = keras.Sequential(
    [keras.Input((32,)), layers.Dense(32, activation="relu"), layers.Dense(1)],
    name="discriminator",
)
discriminator.compile(loss="mse", optimizer=keras.optimizers.SGD(learning_rate=5.0))  # CAUSE
z = keras.Input((latent_dim,))
discriminator.trainable = False
combined = keras.Model(z, discriminator(generator(z)), name="combined")
combined.compile(loss="mse", optimizer=keras.optimizers.Adam(2e-4, 0.5))

d_guard, g_guard = NanGuard("captures"), NanGuard("captures")
keras.callbacks.CallbackList([d_guard], model=discriminator).on_train_begin()
keras.callbacks.CallbackList([g_guard], model=combined).on_train_begin()

batch_size = 64
valid, fake = np.ones((batch_size, 1)), np.zeros((batch_size, 1))
for iteration in range(60):
    imgs = X_train[rng.integers(0, len(X_train), batch_size)]
    noise = rng.normal(0, 1, (batch_size, latent_dim))
    gen_imgs = generator.predict(noise, verbose=0)
    discriminator.trainable = True
    d_loss_real = discriminator.train_on_batch(imgs, valid)
    d_loss_fake = discriminator.train_on_batch(gen_imgs, fake)
    discriminator.trainable = False
    g_loss = combined.train_on_batch(noise, valid)
    if discriminator.stop_training or combined.stop_training:
        break
    print(f"{iteration} [D loss: {0.5 * (d_loss_real + d_loss_fake):.4g}] [G loss: {g_loss:.4g}]")
print("iterations run:", iteration + 1)
