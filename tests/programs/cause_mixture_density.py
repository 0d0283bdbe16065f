"""Mixture density network on Bishop's inverse-sine problem (x = y + 0.3 sin(2 pi y) + noise, predict y from x),
custom GradientTape loop, research-notebook style; written by a helper as its users write it.

The bug: mdn_loss evaluates the mixture likelihood in probability space: each component's density is
exp(-0.5 z^2) / (sigma sqrt(2 pi)) with sigma = exp(raw) unbounded. The targets are hours (0-24), the means start near 0
and sigma shrinks as the fit sharpens; for a target that lies ~14 sigmas from every component mean, every exp(-0.5 z^2) underflows to 0, the mixture density is 0 and
log(0) = -inf: the loss goes +inf (and its gradients NaN).
Fix: compute the log-likelihood in log space with tf.reduce_logsumexp(log_pi + log N(y | mu, sigma), axis=-1).
"""
import math

import numpy as np
import tensorflow as tf

from pyadapter import guard_step

# seeds Python's random, NumPy and TensorFlow: Keras 3 draws its initializers' seeds from Python's random
tf.keras.utils.set_random_seed(0)

N_SAMPLES = 2000
N_COMPONENTS = 5
BATCH_SIZE = 100
EPOCHS = 20
LEARNING_RATE = 5e-3

# ---------------------------------------------------------------- data
y_data = np.random.uniform(0.0, 1.0, (N_SAMPLES, 1)).astype(np.float32)
x_data = (y_data + 0.3 * np.sin(2 * np.pi * y_data) + np.random.uniform(-0.1, 0.1, (N_SAMPLES, 1))).astype(np.float32)
# the target is a time of day in hours
y_data = 24.0 * y_data

dataset = tf.data.Dataset.from_tensor_slices((x_data, y_data)).shuffle(N_SAMPLES, seed=1).batch(BATCH_SIZE)


# ---------------------------------------------------------------- model
class MDN(tf.keras.Model):
    def __init__(self, n_hidden=24, n_components=N_COMPONENTS):
        super().__init__()
        self.hidden1 = tf.keras.layers.Dense(n_hidden, activation="tanh")
        self.hidden2 = tf.keras.layers.Dense(n_hidden, activation="tanh")
        self.pi_logits = tf.keras.layers.Dense(n_components)
        self.mu = tf.keras.layers.Dense(n_components)
        self.log_sigma = tf.keras.layers.Dense(n_components)

    def call(self, x):
        h = self.hidden2(self.hidden1(x))
        pi = tf.nn.softmax(self.pi_logits(h), axis=-1)
        sigma = tf.exp(self.log_sigma(h))
        return pi, self.mu(h), sigma


ONE_OVER_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def gaussian_pdf(y, mu, sigma):
    z = (y - mu) / sigma
    return ONE_OVER_SQRT_2PI * tf.exp(-0.5 * tf.square(z)) / sigma  # EXP


def mdn_loss(y, pi, mu, sigma):
    likelihood = tf.reduce_sum(pi * gaussian_pdf(y, mu, sigma), axis=-1)
    return -tf.reduce_mean(tf.math.log(likelihood))  # CHANGE


model = MDN()
optimizer = tf.keras.optimizers.Adam(LEARNING_RATE)


@guard_step(capture_dir="captures", model=model, optimizer=optimizer)
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        pi, mu, sigma = model(x, training=True)
        loss = mdn_loss(y, pi, mu, sigma)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for epoch in range(EPOCHS):
    losses = []
    for x_batch, y_batch in dataset:
        losses.append(float(train_step(x_batch, y_batch)))
    if epoch % 5 == 0:
        print(f"epoch {epoch:3d}  nll {np.mean(losses):.4f}")
print("done")
