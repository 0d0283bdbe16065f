"""A conditional LSGAN on toy 16x16 "digits", adapted from the tensorflow.org DCGAN tutorial (two tapes in one
train_step, the models and both optimizers in a tf.train.Checkpoint given to guard_step), a label embedding
concatenated to the noise and to the image. The generator's SGD rate is 10x too high (0.02, meant 0.002): the run
diverges after about a hundred steps. The divergence was told the first optimizer's rate and line (the
checkpoint lists the discriminator's first: 0.002), and lowering it did not help."""
import time

import numpy as np
import tensorflow as tf
from tensorflow.keras import layers

from pyadapter import guard_step

BUFFER_SIZE = 4096
BATCH_SIZE = 64
EPOCHS = 20
noise_dim = 32
num_classes = 4
embed_dim = 16

# ---- data: class k = a bright square in quadrant k, plus noise, scaled to [-1, 1]
tf.keras.utils.set_random_seed(42)
rng = np.random.default_rng(42)
n = 4096
train_labels = rng.integers(0, num_classes, size=n)
train_images = rng.normal(0, 0.1, size=(n, 16, 16, 1)).astype("float32")
for i, k in enumerate(train_labels):
    r, c = divmod(int(k), 2)
    train_images[i, r * 8 + 2:r * 8 + 6, c * 8 + 2:c * 8 + 6, 0] += 1.0
train_images = (train_images - train_images.mean()) / train_images.std()
train_dataset = (tf.data.Dataset.from_tensor_slices((train_images, train_labels.astype("int32")))
                 .shuffle(BUFFER_SIZE).batch(BATCH_SIZE, drop_remainder=True))


def make_generator_model():
    noise = layers.Input(shape=(noise_dim,))
    label = layers.Input(shape=(1,), dtype="int32")
    emb = layers.Flatten()(layers.Embedding(num_classes, embed_dim)(label))
    x = layers.Concatenate()([noise, emb])
    x = layers.Dense(128)(x)
    x = layers.LeakyReLU()(x)
    x = layers.Dense(256)(x)
    x = layers.LeakyReLU()(x)
    x = layers.Dense(16 * 16)(x)  # data are standardized, so a linear output
    img = layers.Reshape((16, 16, 1))(x)
    return tf.keras.Model([noise, label], img, name="generator")


def make_discriminator_model():
    img = layers.Input(shape=(16, 16, 1))
    label = layers.Input(shape=(1,), dtype="int32")
    emb = layers.Flatten()(layers.Embedding(num_classes, embed_dim)(label))
    x = layers.Concatenate()([layers.Flatten()(img), emb])
    x = layers.Dense(256)(x)
    x = layers.LeakyReLU()(x)
    x = layers.Dense(128)(x)
    x = layers.LeakyReLU()(x)
    out = layers.Dense(1)(x)  # least-squares GAN: linear output
    return tf.keras.Model([img, label], out, name="discriminator")


generator = make_generator_model()
discriminator = make_discriminator_model()

mse = tf.keras.losses.MeanSquaredError()


def discriminator_loss(real_output, fake_output):
    real_loss = mse(tf.ones_like(real_output), real_output)
    fake_loss = mse(tf.zeros_like(fake_output), fake_output)
    return 0.5 * (real_loss + fake_loss)


def generator_loss(fake_output):
    return 0.5 * mse(tf.ones_like(fake_output), fake_output)


generator_optimizer = tf.keras.optimizers.SGD(learning_rate=0.02, momentum=0.9)  # CHANGE
discriminator_optimizer = tf.keras.optimizers.SGD(learning_rate=0.002, momentum=0.9)

checkpoint = tf.train.Checkpoint(generator_optimizer=generator_optimizer,
                                 discriminator_optimizer=discriminator_optimizer,
                                 generator=generator,
                                 discriminator=discriminator)


@guard_step(capture_dir="captures", checkpoint=checkpoint)
@tf.function
def train_step(images, labels):
    noise = tf.random.normal([BATCH_SIZE, noise_dim])

    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        generated_images = generator([noise, labels], training=True)

        real_output = discriminator([images, labels], training=True)
        fake_output = discriminator([generated_images, labels], training=True)

        gen_loss = generator_loss(fake_output)
        disc_loss = discriminator_loss(real_output, fake_output)

    gradients_of_generator = gen_tape.gradient(gen_loss, generator.trainable_variables)
    gradients_of_discriminator = disc_tape.gradient(disc_loss, discriminator.trainable_variables)

    generator_optimizer.apply_gradients(zip(gradients_of_generator, generator.trainable_variables))
    discriminator_optimizer.apply_gradients(zip(gradients_of_discriminator, discriminator.trainable_variables))
    return gen_loss, disc_loss


def train(dataset, epochs):
    for epoch in range(epochs):
        start = time.time()
        for image_batch, label_batch in dataset:
            gen_loss, disc_loss = train_step(image_batch, label_batch)
        print(f'Time for epoch {epoch + 1} is {time.time() - start:.1f} sec  gen_loss {float(gen_loss):.4f} disc_loss {float(disc_loss):.4f}')


train(train_dataset, EPOCHS)
