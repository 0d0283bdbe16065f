"""Regression with a learned observation noise sigma (a Gaussian NLL) in a custom loop with a persistent tape: the
network goes through Adam, sigma is a bare tf.Variable the step moves itself with assign_sub, at a rate that
carries it below 0 at once. The output layer's bias (one value, started below 0 for targets centred there) is a
captured weight of the same size and sign (s40b p9: a Dense bias was named in sigma's place)."""
import keras
import numpy as np
import tensorflow as tf

from pyadapter import guard_step

keras.utils.set_random_seed(9)

x = np.random.uniform(-3, 3, (2048, 1)).astype("float32")
y = (np.sin(x) - 0.5 + 0.05 * np.random.randn(2048, 1)).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=9).batch(128)

model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(64, activation="tanh"),
                          keras.layers.Dense(64, activation="tanh"),
                          keras.layers.Dense(1, bias_initializer=keras.initializers.Constant(-0.5))])
optimizer = keras.optimizers.Adam(1e-2)
sigma = tf.Variable(1.0, name="sigma")
sigma_lr = 10.0


@guard_step(capture_dir="captures", model=model, optimizer=optimizer)
@tf.function
def train_step(xb, yb):
    with tf.GradientTape(persistent=True) as tape:
        mu = model(xb, training=True)
        nll = tf.reduce_mean(tf.square(yb - mu)) / (2.0 * sigma ** 2) + tf.math.log(sigma)  # ORIGIN
    grads = tape.gradient(nll, model.trainable_variables)
    g_sigma = tape.gradient(nll, sigma)
    del tape
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    sigma.assign_sub(sigma_lr * g_sigma)
    return nll


for epoch in range(30):
    for xb, yb in ds:
        nll = train_step(xb, yb)
