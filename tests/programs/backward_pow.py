"""A focal-loss style factor (1 - p) ** gamma with gamma < 1, its base computed on the line before: finite going
forward, but its gradient gamma * (1 - p) ** (gamma - 1) is +inf where p = 1. The line to change is the pow's,
not the line that computed its input."""

import tensorflow as tf

p = tf.Variable([0.25, 1.0, 0.5])
gamma = 0.5


@tf.function
def gradient():
    with tf.GradientTape() as tape:
        base = 1.0 - p
        modulating = tf.pow(base, gamma)  # ORIGIN
        loss = tf.reduce_sum(modulating * 2.0)
    return tape.gradient(loss, p)


print(gradient().numpy())
