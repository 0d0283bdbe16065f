"""Square root of a value that went negative: Sqrt makes NaN."""

import tensorflow as tf


@tf.function
def distance(x):
    shifted = x - 3.0
    return tf.sqrt(shifted)  # ORIGIN


print(distance(tf.constant([1.0, 4.0, 9.0])).numpy())
