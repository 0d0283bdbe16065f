"""A mixed-precision regression with its own train_step, after keras.io "Customizing what happens in fit()": Keras 3
wraps the optimizer in a LossScaleOptimizer at compile, and the step never calls scale_loss. Its loss, a sum of
squares over a batch of 2048 in float16, is inf from the first step."""
import keras
import numpy as np
import tensorflow as tf
from keras import layers

from pyadapter import NanGuard

keras.mixed_precision.set_global_policy("mixed_float16")

config = {
    "batch_size": 2048,
    "epochs": 3,
    "lr": 1e-3,
    "n_features": 16,
    "n_targets": 4,
}


class CustomModel(keras.Model):
    def __init__(self, n_targets, **kwargs):
        super().__init__(**kwargs)
        self.hidden1 = layers.Dense(64, activation="relu")
        self.hidden2 = layers.Dense(64, activation="relu")
        self.out = layers.Dense(n_targets)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")

    def call(self, inputs, training=False):
        x = self.hidden1(inputs)
        x = self.hidden2(x)
        return self.out(x)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            y = tf.cast(y, y_pred.dtype)
            loss = tf.reduce_sum(tf.square(y - y_pred))  # ORIGIN: a sum of squares over the whole batch, in float16
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)
        self.optimizer.apply_gradients(zip(gradients, trainable_vars))
        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, y_pred)
        return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

    @property
    def metrics(self):
        return [self.loss_tracker, self.mae_metric]


rng = np.random.default_rng(42)
n = 8192
x = rng.normal(size=(n, config["n_features"])).astype("float32")
w_true = rng.normal(size=(config["n_features"], config["n_targets"])).astype("float32")
y = (x @ w_true * 3.0 + 5.0).astype("float32")

model = CustomModel(config["n_targets"])
model.compile(optimizer=keras.optimizers.Adam(config["lr"]))
model.fit(x, y, batch_size=config["batch_size"], epochs=config["epochs"], callbacks=[NanGuard("captures")])
