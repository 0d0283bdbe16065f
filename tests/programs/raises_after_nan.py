"""Makes a NaN, then fails with an exception: nanlens run must still close and report the dump."""

import tensorflow as tf


@tf.function
def root(x):
    return tf.sqrt(x)  # ORIGIN


print(root(tf.constant([-1.0, 1.0])).numpy())
raise RuntimeError("the script failed after the NaN")
