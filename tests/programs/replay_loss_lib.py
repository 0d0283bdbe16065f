"""Losses for replay_loss_main.py: a hand-written binary cross-entropy that takes log(1 - p) directly."""

import tensorflow as tf


def binary_log_loss(y_true, y_pred):
    log_p = tf.math.log(y_pred)
    log_not_p = tf.math.log(1.0 - y_pred)  # ORIGIN
    return -tf.reduce_mean(y_true * log_p + (1.0 - y_true) * log_not_p, axis=-1)
