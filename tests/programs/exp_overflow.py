"""exp of a large logit overflows float32 to +inf; the normalization downstream turns it into NaN."""

import tensorflow as tf


@tf.function
def naive_softmax(x):
    scaled = x * 50.0
    e = tf.exp(scaled)  # ORIGIN
    return e / tf.reduce_sum(e)


print(naive_softmax(tf.constant([0.5, 2.0, 1.0])).numpy())
