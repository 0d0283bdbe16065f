"""Page views per hour as a Poisson regression under mixed_float16: the model predicts the log of the rate and a
`compute_loss` of its own takes exp() of it, in float16. Busy hours have counts past 65504 (e^11.1), float16's
largest value, so exp overflows in exactly those rows: no record is wrong, the dtype is."""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)


class PoissonRegressor(keras.Model):
    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        rate = tf.exp(y_pred)  # CHANGE
        return tf.reduce_mean(tf.cast(rate, "float32") - y * tf.cast(y_pred, "float32"))


rng = np.random.default_rng(0)
hour_features = rng.normal(size=(512, 4)).astype("float32")
views = rng.poisson(np.exp(np.clip(9 + hour_features.sum(1, keepdims=True), 0, 13.5))).astype("float32")

inputs = keras.Input(shape=(4,))
log_rate = keras.layers.Dense(1, kernel_initializer="ones", bias_initializer=keras.initializers.Constant(9.0))(inputs)
model = PoissonRegressor(inputs, log_rate)
model.compile(optimizer="adam")
model.fit(hour_features, views, batch_size=64, epochs=2, verbose=0, callbacks=[NanGuard("captures")])
