"""Count regression (bike rentals per hour) trained on the Poisson deviance, written by a helper as a user would
(a functional Keras model, keras.io style, training at module level). The deviance term y*log(y/mu) is 0 for
y == 0 by convention, and the loss guards that with tf.where.

The bug: tf.where(y_true > 0, y_true * tf.math.log(y_true / y_pred), 0.0) still evaluates log(0 / mu) = -inf for
a zero count, in the branch it does not select, so the loss stays finite; backward, the zero gradient of that
branch meets log's slope 1/0 = inf: 0 * inf = NaN. Only batches holding a zero count fail, and the zero count is
valid data. Fix: tf.math.xlogy(y_true, y_true / y_pred).
"""
import keras
import numpy as np
import tensorflow as tf
from keras import layers

from pyadapter import NanGuard

keras.utils.set_random_seed(42)

# --- synthetic "bike sharing" data: hour-of-day, temperature, humidity, windspeed, workingday
rng = np.random.default_rng(0)
n = 2048
hour = rng.integers(0, 24, n)
temp = rng.normal(15, 8, n)
hum = rng.uniform(0.2, 1.0, n)
wind = rng.gamma(2.0, 5.0, n)
workday = rng.integers(0, 2, n)
rate = np.exp(2.5 + 0.04 * temp - 1.2 * hum + 0.6 * workday * ((hour == 8) | (hour == 17)) - 0.02 * wind)
counts = rng.poisson(rate).astype("float32")

features = np.stack([np.sin(2 * np.pi * hour / 24), np.cos(2 * np.pi * hour / 24),
                     (temp - 15) / 8, hum, wind / 10, workday], axis=1).astype("float32")


def poisson_deviance(y_true, y_pred):
    """Unit Poisson deviance 2 * (y log(y/mu) - (y - mu)), with 0 log 0 = 0."""
    y_log_y_mu = tf.where(y_true > 0, y_true * tf.math.log(y_true / y_pred), 0.0)  # CHANGE
    return tf.reduce_mean(2.0 * (y_log_y_mu - (y_true - y_pred)), axis=-1)


inputs = keras.Input(shape=(6,), name="features")
x = layers.Dense(32, activation="relu")(inputs)
x = layers.Dense(32, activation="relu")(x)
outputs = layers.Dense(1, activation="softplus", name="rate")(x)
model = keras.Model(inputs, outputs, name="bike_counts")

model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=poisson_deviance, metrics=["mae"])
history = model.fit(features, counts[:, None], batch_size=64, epochs=5, validation_split=0.1,
                    callbacks=[NanGuard("captures")])
print("final loss", history.history["loss"][-1])
