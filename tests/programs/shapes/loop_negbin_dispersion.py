"""Negative-binomial (NB2) regression of visit counts in a custom loop, the dispersion learned as a raw
tf.Variable beside the model's weights. The counts are barely overdispersed, so SGD pushes alpha towards 0 and,
one step, past it: r = 1 / alpha turns negative and the log of mu / (r + mu) is NaN.
The fix: learn log(alpha) (or a softplus of a raw variable), so no update can make the dispersion negative."""

import keras
import numpy as np
import pandas as pd
import tensorflow as tf

from pyadapter import guard_step

keras.utils.set_random_seed(3)
rng = np.random.default_rng(3)

n = 2000
df = pd.DataFrame(rng.normal(size=(n, 4)), columns=["x0", "x1", "x2", "x3"])
mu_true = np.exp(1.0 + 0.4 * df.x0 - 0.3 * df.x1)
df["visits"] = rng.negative_binomial(50.0, 50.0 / (50.0 + mu_true))

X = df[["x0", "x1", "x2", "x3"]].values.astype("float32")
Y = df["visits"].values.astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((X, Y)).shuffle(n, seed=3).batch(128)

model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
alpha = tf.Variable(0.5, name="dispersion")  # CHANGE: Var = mu + alpha * mu^2, must stay > 0
optimizer = keras.optimizers.SGD(learning_rate=0.1)


def nb_nll(y, log_mu, alpha):
    mu = tf.exp(log_mu)
    r = 1.0 / alpha
    ll = tf.math.lgamma(y + r) - tf.math.lgamma(r) - tf.math.lgamma(y + 1.0)
    ll += r * tf.math.log(r / (r + mu)) + y * tf.math.log(mu / (r + mu))  # ORIGIN
    return -tf.reduce_mean(ll)


@guard_step(capture_dir="captures", model=model, optimizer=optimizer)
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        log_mu = tf.squeeze(model(x, training=True), -1)
        loss = nb_nll(y, log_mu, alpha)
    variables = model.trainable_variables + [alpha]
    grads = tape.gradient(loss, variables)
    optimizer.apply_gradients(zip(grads, variables))
    return loss


for epoch in range(30):
    total = 0.0
    for step, (x, y) in enumerate(dataset):
        total += float(train_step(x, y))
    print(f"epoch {epoch}: nll={total / (step + 1):.4f} alpha={alpha.numpy():.4f}")
