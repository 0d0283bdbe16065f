"""tf.norm of a zero vector is 0, but its gradient is NaN: the classic "distance loss" backward NaN."""

import tensorflow as tf

offset = tf.Variable([[0.0, 0.0], [1.0, 2.0]])


@tf.function
def gradient():
    with tf.GradientTape() as tape:
        lengths = tf.norm(offset, axis=1)  # ORIGIN
        loss = tf.reduce_mean(lengths)
    return tape.gradient(loss, offset)


print(gradient().numpy())
