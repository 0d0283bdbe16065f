"""Bayes by backprop, Poisson regression of counts, in a custom loop: each step samples the weights
w = mu + softplus(rho) * eps with unseeded ``tf.random.normal`` (the reparameterisation trick) and takes the
Poisson log-likelihood of the rate x @ w. The rate is linear: a sampled w that makes it negative for one sample
gives log of a negative number, NaN. Which step that hits, and whether a re-run of that step does, depends on the
draw. Fix: rate = tf.exp(x @ w) (a log link).
"""

import numpy as np
import tensorflow as tf

from pyadapter import guard_step

tf.random.set_seed(7)
rng = np.random.default_rng(7)
features = rng.uniform(0.0, 1.0, size=(2048, 6)).astype("float32")
counts = rng.poisson(features.sum(axis=1) + 0.5).astype("float32")

mu = tf.Variable(tf.fill([6, 1], 0.2))
rho = tf.Variable(tf.fill([6, 1], -1.05))
optimizer = tf.keras.optimizers.Adam(0.01)
dataset = tf.data.Dataset.from_tensor_slices((features, counts)).batch(64)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        sigma = tf.nn.softplus(rho)
        eps = tf.random.normal(tf.shape(mu))
        w = mu + sigma * eps
        rate = tf.squeeze(x @ w, axis=1)
        log_likelihood = y * tf.math.log(rate) - rate  # ORIGIN
        kl = tf.reduce_sum(0.5 * (sigma**2 + mu**2 - 1.0) - tf.math.log(sigma))
        loss = -tf.reduce_mean(log_likelihood) + kl / 2048.0
    grads = tape.gradient(loss, [mu, rho])
    optimizer.apply_gradients(zip(grads, [mu, rho]))
    return loss


checkpoint = tf.train.Checkpoint(mu=mu, rho=rho, optimizer=optimizer)
train_step = guard_step(train_step, checkpoint=checkpoint, capture_dir="captures")

for epoch in range(20):
    for x, y in dataset:
        loss = train_step(x, y)
    print(f"epoch {epoch}: loss {float(loss):.4f}")
