"""A research repo's trainer: a class built from a config, its training step a ``tf.function`` of one of its
methods guarded in ``__init__``, and a softmax temperature it keeps as ``self.temperature`` and anneals in
``train()``. The step only reads the temperature; the schedule reaches 0 at step 24 and the scaled logits are
+/-inf.
"""

import numpy as np
import tensorflow as tf

from pyadapter import guard_step

CONFIG = {"hidden": 24, "lr": 2e-3, "t_start": 1.5, "anneal_steps": 24, "steps": 50, "batch_size": 16}


class Trainer:
    def __init__(self, config):
        self.config = config
        self.model = tf.keras.Sequential([
            tf.keras.Input((8,)),
            tf.keras.layers.Dense(config["hidden"], activation="tanh"),
            tf.keras.layers.Dense(4),
        ])
        self.optimizer = tf.keras.optimizers.RMSprop(config["lr"])
        self.temperature = tf.Variable(config["t_start"], trainable=False)
        self.train_step = guard_step(capture_dir="captures", model=self.model, optimizer=self.optimizer)(
            tf.function(self._train_step)
        )

    def _train_step(self, features, labels):
        with tf.GradientTape() as tape:
            logits = self.model(features, training=True) / self.temperature  # ORIGIN
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss

    def train(self, features, labels):
        cfg = self.config
        data = tf.data.Dataset.from_tensor_slices((features, labels)).batch(cfg["batch_size"]).repeat()
        for step, (batch_x, batch_y) in enumerate(data.take(cfg["steps"])):
            self.temperature.assign(max(cfg["t_start"] * (1 - step / cfg["anneal_steps"]), 0.0))
            loss = self.train_step(batch_x, batch_y)
            if step % 10 == 0:
                print(f"step {step}: loss {float(loss):.4f}")


if __name__ == "__main__":
    tf.keras.utils.set_random_seed(1)
    rng = np.random.default_rng(1)
    features = rng.normal(size=(400, 8)).astype("float32")
    labels = rng.integers(0, 4, size=400)
    Trainer(CONFIG).train(features, labels)
