"""A TF-model-garden-style trainer: absl flags, ``app.run(main)``, and the training step a closure inside the
experiment function, guarded with ``guard_step``. Run: ``python loop_absl_app.py --learning_rate=0.5``."""

import numpy as np
import tensorflow as tf
from absl import app, flags

from pyadapter import guard_step

flags.DEFINE_float("learning_rate", 0.5, "SGD learning rate.")
flags.DEFINE_integer("train_steps", 60, "Number of training steps.")
flags.DEFINE_string("model_dir", "captures", "Where bundles go.")
FLAGS = flags.FLAGS


def cross_entropy(labels, logits):
    probs = tf.nn.softmax(logits)
    return -tf.reduce_mean(tf.reduce_sum(labels * tf.math.log(probs), axis=-1))  # ORIGIN: log of a softmax


def run_experiment(model_dir, learning_rate, train_steps):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(512, 16)).astype("float32") * 8.0
    y = tf.one_hot(rng.integers(0, 4, size=512), 4)
    model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(64, activation="relu"),
                                 tf.keras.layers.Dense(4)])
    optimizer = tf.keras.optimizers.SGD(learning_rate)

    @guard_step(capture_dir=model_dir, model=model, optimizer=optimizer)
    @tf.function
    def train_step(features, labels):
        with tf.GradientTape() as tape:
            loss = cross_entropy(labels, model(features, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)
    for step, (features, labels) in enumerate(dataset.take(train_steps)):
        loss = train_step(features, labels)
        if step % 10 == 0:
            print(f"step {step}: loss {float(loss):.4f}")


def main(argv):
    del argv
    tf.keras.utils.set_random_seed(0)
    run_experiment(FLAGS.model_dir, FLAGS.learning_rate, FLAGS.train_steps)


if __name__ == "__main__":
    app.run(main)
