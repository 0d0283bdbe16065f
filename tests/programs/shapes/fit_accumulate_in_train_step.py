"""Gradient accumulation in a keras.Model subclass (simulate batch 256 with micro-batches of 32), trained with fit.

The subclass keeps its accumulators and micro-step counter in raw tf.Variables it makes in build() (``self.acc``,
``self.n_acc``), which no model, metric or optimizer lists, and applies them under a tf.cond every 8 micro-steps,
after resetting the counter and then dividing by it: 0/0 at step 7."""
import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

keras.utils.set_random_seed(9)


class GradAccumModel(keras.Model):
    def __init__(self, accum_steps=8, **kwargs):
        super().__init__(**kwargs)
        self.accum_steps = accum_steps
        self.d1 = keras.layers.Dense(64, activation="relu")
        self.d2 = keras.layers.Dense(1, activation="sigmoid")

    def build(self, input_shape):
        super().build(input_shape)
        self.d1.build(input_shape)
        self.d2.build((None, 64))
        self.n_acc = tf.Variable(0, trainable=False, dtype=tf.int32)
        self.acc = [tf.Variable(tf.zeros_like(v), trainable=False) for v in self.trainable_variables]

    def call(self, x):
        return self.d2(self.d1(x))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=pred)
        grads = tape.gradient(loss, self.trainable_variables)
        for a, g in zip(self.acc, grads):
            a.assign_add(g)
        self.n_acc.assign_add(1)

        def apply():
            self.n_acc.assign(0)
            n = tf.cast(self.n_acc, tf.float32)
            self.optimizer.apply_gradients(zip([a / n for a in self.acc], self.trainable_variables))  # CHANGE
            for a in self.acc:
                a.assign(tf.zeros_like(a))
            return tf.constant(True)

        tf.cond(tf.equal(self.n_acc, self.accum_steps), apply, lambda: tf.constant(False))
        for m in self.metrics:
            if m.name == "loss":
                m.update_state(loss)
            else:
                m.update_state(y, pred)
        return {m.name: m.result() for m in self.metrics}


rng = np.random.default_rng(9)
x = rng.normal(size=(4096, 20)).astype("float32")
y = (x[:, 0] * x[:, 1] > 0).astype("float32")[:, None]

model = GradAccumModel(accum_steps=8)
model.build((None, 20))
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy", metrics=["accuracy"])
model.fit(x, y, batch_size=32, epochs=2, callbacks=[NanGuard("captures")])
