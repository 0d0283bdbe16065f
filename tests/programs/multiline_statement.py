"""A Gaussian log-density written over three lines, as tensorflow.org's CVAE tutorial writes it: tf.exp(-logvar)
overflows for a log-variance of -100. TensorFlow records the statement's last line for the Exp (autograph converts
the function), which holds no exp: the code shown under the origin is the whole statement."""

import numpy as np
import tensorflow as tf


def log_normal_pdf(sample, mean, logvar, raxis=1):
    log2pi = tf.math.log(2.0 * np.pi)
    return tf.reduce_sum(
        -0.5 * ((sample - mean) ** 2.0 * tf.exp(-logvar) + logvar + log2pi),  # EXP
        axis=raxis)  # ORIGIN


@tf.function
def negative_log_likelihood(z, mean, logvar):
    return -tf.reduce_mean(log_normal_pdf(z, mean, logvar))


z = tf.constant([[0.5, 1.0], [0.2, 0.1]])
mean = tf.zeros([2, 2])
logvar = tf.constant([[0.0, -100.0], [0.1, 0.2]])
print(negative_log_likelihood(z, mean, logvar).numpy())
