"""sqrt(x) at x = 0 is finite going forward; its gradient 0.5 / sqrt(0) is +inf (backward pass only)."""

import tensorflow as tf

x = tf.Variable([0.0, 4.0])


@tf.function
def gradient():
    with tf.GradientTape() as tape:
        y = tf.sqrt(x)  # ORIGIN
        loss = tf.reduce_sum(y * 3.0)
    return tape.gradient(loss, x)


print(gradient().numpy())
