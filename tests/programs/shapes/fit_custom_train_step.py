"""keras.io "Customizing what happens in fit()" (TensorFlow backend): a train_step that calls self.compute_loss and
updates its metrics by hand, a test_step of its own, and validation data.

The loss is a relative squared error (y - p)^2 / y^2 written by hand; targets of 0 divide by zero.
Fix: divide by max(y^2, eps).
"""

import keras
import numpy as np
import tensorflow as tf
from keras import layers


def relative_squared_error(y_true, y_pred):
    return tf.reduce_mean(tf.square(y_true - y_pred) / tf.square(y_true), axis=-1)  # ORIGIN


class CustomModel(keras.Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")

    def train_step(self, data):
        x, y = data

        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)

        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)
        self.optimizer.apply_gradients(zip(gradients, trainable_vars))

        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, y_pred)
        return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, y_pred)
        return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

    @property
    def metrics(self):
        return [self.loss_tracker, self.mae_metric]


keras.utils.set_random_seed(5)
inputs = keras.Input(shape=(32,))
x = layers.Dense(16, activation="relu")(inputs)
outputs = layers.Dense(1)(x)
model = CustomModel(inputs, outputs)
model.compile(optimizer="adam", loss=relative_squared_error)

rng = np.random.default_rng(5)
x = rng.random((1000, 32)).astype("float32")
y = (1.0 + rng.random((1000, 1))).astype("float32")
y[700] = 0.0  # a reading that came back as 0
x_val = rng.random((200, 32)).astype("float32")
y_val = (1.0 + rng.random((200, 1))).astype("float32")

from pyadapter import NanGuard  # noqa: E402

history = model.fit(
    x, y, validation_data=(x_val, y_val), epochs=3, batch_size=64, shuffle=False, callbacks=[NanGuard("captures")]
)
print("epochs:", len(history.history["loss"]))
