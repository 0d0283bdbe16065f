"""WGAN-GP on the 8-gaussians toy dataset (after Gulrajani et al. 2017, gan_toy.py), TF2 custom loop: a generator
and a critic, each with its own Adam of the same settings, both in one tf.train.Checkpoint."""
import os
import time

import numpy as np
import tensorflow as tf
from tensorflow.keras import layers

from pyadapter import guard_step

FLAGS = dict(
    dim=16,          # hidden units
    batch_size=256,
    lambda_gp=0.1,   # smaller lambda for toy tasks, as in the paper's toy runs
    n_critic=5,
    critic_dropout=0.5,
    iters=2000,
    lr=1e-3,
    seed=1,
)

tf.random.set_seed(FLAGS["seed"])
np.random.seed(FLAGS["seed"])


def inf_train_gen(batch_size):
    scale = 2.0
    centers = [(1, 0), (-1, 0), (0, 1), (0, -1),
               (1. / np.sqrt(2), 1. / np.sqrt(2)), (1. / np.sqrt(2), -1. / np.sqrt(2)),
               (-1. / np.sqrt(2), 1. / np.sqrt(2)), (-1. / np.sqrt(2), -1. / np.sqrt(2))]
    centers = [(scale * x, scale * y) for x, y in centers]
    while True:
        dataset = []
        for i in range(batch_size):
            point = np.random.randn(2) * .02
            center = centers[np.random.choice(len(centers))]
            point[0] += center[0]
            point[1] += center[1]
            dataset.append(point)
        dataset = np.array(dataset, dtype='float32')
        dataset /= 1.414  # stdev
        yield dataset


def make_generator(dim):
    return tf.keras.Sequential([
        layers.Input((2,)),
        layers.Dense(dim, activation='relu'),
        layers.Dense(dim, activation='relu'),
        layers.Dense(dim, activation='relu'),
        layers.Dense(2),
    ], name='generator')


def make_critic(dim, drop=FLAGS['critic_dropout']):
    return tf.keras.Sequential([
        layers.Input((2,)),
        layers.Dense(dim, activation='relu'),
        layers.Dropout(drop),
        layers.Dense(dim, activation='relu'),
        layers.Dropout(drop),
        layers.Dense(dim, activation='relu'),
        layers.Dropout(drop),
        layers.Dense(1),
    ], name='critic')


generator = make_generator(FLAGS['dim'])
critic = make_critic(FLAGS['dim'])

generator_optimizer = tf.keras.optimizers.Adam(FLAGS['lr'], beta_1=0.5, beta_2=0.9)
critic_optimizer = tf.keras.optimizers.Adam(FLAGS['lr'], beta_1=0.5, beta_2=0.9)

checkpoint_dir = './training_checkpoints'
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt")
checkpoint = tf.train.Checkpoint(generator_optimizer=generator_optimizer,
                                 critic_optimizer=critic_optimizer,
                                 generator=generator,
                                 critic=critic)


def gradient_penalty(real, fake):
    alpha = tf.random.uniform([tf.shape(real)[0], 1], 0., 1.)
    interpolates = real + alpha * (fake - real)
    with tf.GradientTape() as gp_tape:
        gp_tape.watch(interpolates)
        disc_interpolates = critic(interpolates, training=True)
    grads = gp_tape.gradient(disc_interpolates, interpolates)
    slopes = tf.sqrt(tf.reduce_sum(tf.square(grads), axis=1))  # ORIGIN: the slope of sqrt at 0 is infinite where the critic is flat
    return tf.reduce_mean((slopes - 1.) ** 2)


@guard_step(capture_dir="captures", checkpoint=checkpoint)
@tf.function
def train_step(real_data):
    batch_size = tf.shape(real_data)[0]
    for _ in range(FLAGS['n_critic']):
        noise = tf.random.normal([batch_size, 2])
        with tf.GradientTape() as tape:
            fake_data = generator(noise, training=True)
            disc_real = critic(real_data, training=True)
            disc_fake = critic(fake_data, training=True)
            disc_cost = tf.reduce_mean(disc_fake) - tf.reduce_mean(disc_real)
            disc_cost += FLAGS['lambda_gp'] * gradient_penalty(real_data, fake_data)
        critic_grads = tape.gradient(disc_cost, critic.trainable_variables)
        critic_optimizer.apply_gradients(zip(critic_grads, critic.trainable_variables))

    noise = tf.random.normal([batch_size, 2])
    with tf.GradientTape() as tape:
        gen_cost = -tf.reduce_mean(critic(generator(noise, training=True), training=True))
    gen_grads = tape.gradient(gen_cost, generator.trainable_variables)
    generator_optimizer.apply_gradients(zip(gen_grads, generator.trainable_variables))
    return disc_cost, gen_cost


if __name__ == '__main__':
    data = inf_train_gen(FLAGS['batch_size'])
    start = time.time()
    for iteration in range(FLAGS['iters']):
        _data = next(data)
        disc_cost, gen_cost = train_step(tf.constant(_data))
        if iteration % 100 == 99:
            print(f"iter {iteration + 1}: disc_cost {float(disc_cost):.4f} gen_cost {float(gen_cost):.4f} "
                  f"({time.time() - start:.1f}s)")
        if iteration % 1000 == 999:
            checkpoint.save(file_prefix=checkpoint_prefix)
