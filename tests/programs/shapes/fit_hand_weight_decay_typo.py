"""A keras.Model subclass with constructor arguments that applies a decoupled weight decay by hand in its own
train_step (AdamW-style), as a tester wrote it (s41e p7), built with weight_decay=5e3 (meant 5e-4): each step
multiplies the kernels by 1 - 1e-3 * 5e3 = -4. The cause named Adam's rate, and the rate it offered kept
lr * wd just below 1: finite, and the model learned nothing."""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

keras.utils.set_random_seed(21)


class DecoupledWDModel(keras.Model):
    def __init__(self, hidden=64, weight_decay=5e-4, **kwargs):
        super().__init__(**kwargs)
        self.weight_decay = weight_decay
        self.d1 = keras.layers.Dense(hidden, activation="relu")
        self.d2 = keras.layers.Dense(hidden, activation="relu")
        self.out = keras.layers.Dense(3)

    def call(self, x, training=False):
        return self.out(self.d2(self.d1(x)))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            logits = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=logits)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        lr = self.optimizer.learning_rate
        for v in self.trainable_variables:
            if "kernel" in v.name:
                v.assign_sub(lr * self.weight_decay * v)
        for m in self.metrics:
            if m.name == "loss":
                m.update_state(loss)
            else:
                m.update_state(y, logits)
        return {m.name: m.result() for m in self.metrics}


rng = np.random.default_rng(21)
x = rng.normal(size=(4096, 16)).astype("float32")
y = np.argmax(x[:, :3] + 0.2 * rng.normal(size=(4096, 3)), axis=1)

model = DecoupledWDModel(hidden=64, weight_decay=5e3)  # CHANGE: meant 5e-4
model.compile(
    optimizer=keras.optimizers.Adam(1e-3),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
model.fit(x, y, batch_size=64, epochs=3, callbacks=[NanGuard("captures")])
