"""Bench workload: a Keras MLP trained for STEPS steps whose last batch makes the loss non-finite.

The last batch's inputs are scaled by 1e4, so the softmax saturates to exact zeros and the hand-written
cross-entropy's Log produces -inf in that step only (the line marked ORIGIN).
Usage: python mlp_fit_last_step_nan.py STEPS
"""

import sys

import keras
import numpy as np
import tensorflow as tf

BATCH = 32


def cross_entropy(y_true, y_pred):
    log_probs = tf.math.log(y_pred)  # ORIGIN
    return -tf.reduce_mean(tf.reduce_sum(y_true * log_probs, axis=-1))


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * BATCH, 16)).astype("float32")
    y = keras.utils.to_categorical(rng.integers(0, 10, size=steps * BATCH), 10).astype("float32")
    x[-BATCH:] *= 1e4
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer="adam", loss=cross_entropy, jit_compile=False)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)


if __name__ == "__main__":
    main()
