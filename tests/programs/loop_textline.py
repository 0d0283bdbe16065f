"""A custom training loop with guard_step over ``readings.txt`` in the working folder, read with
``TextLineDataset`` + ``decode_csv`` (the header line skipped). One line of the file holds ``inf``. Used by
tests/test_data_provenance.py: the bundle's data_source must name readings.txt and the line holding that row.

Usage: loop_textline.py CAPTURE_DIR   (run in the folder holding readings.txt)
"""

from __future__ import annotations

import sys

import keras
import tensorflow as tf

from pyadapter import NonFiniteStepError, guard_step


def decode(line):
    fields = tf.io.decode_csv(line, [[0.0]] * 4)
    return tf.stack(fields[:3]), tf.stack(fields[3:])


def main(capture_dir: str) -> int:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(1e-3)
    loss_fn = keras.losses.MeanSquaredError()

    @guard_step(model=model, optimizer=optimizer, capture_dir=capture_dir)
    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    dataset = tf.data.TextLineDataset("readings.txt").skip(1).map(decode).shuffle(200, seed=1).batch(16)  # CHANGE
    try:
        for x, y in dataset:
            train_step(x, y)
    except NonFiniteStepError:
        print("stopped by guard_step")
        return 0
    print("training stayed finite")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
