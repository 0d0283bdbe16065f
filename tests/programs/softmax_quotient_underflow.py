"""In-batch negatives of a two-tower retrieval model, its softmax written by hand at temperature 0.01: every
exp(score / 0.01) is finite (the smallest is exp(-50), 2e-22), but the positive's exp divided by a row's sum of
3e17 is 6e-40, below float32's smallest normal number: the quotient is 0 (or a subnormal flushed to 0), though no
exp is, and its log is -inf."""

import tensorflow as tf


@tf.function
def in_batch_softmax_loss(scores):
    logits = tf.exp(scores / 0.01)  # EXP
    positives = tf.linalg.diag_part(logits) / tf.reduce_sum(logits, axis=1)
    return -tf.reduce_mean(tf.math.log(positives))  # ORIGIN


scores = tf.constant([[-0.5, 0.4, 0.1], [0.2, 0.3, 0.0], [0.1, 0.2, 0.3]])
print(in_batch_softmax_loss(scores).numpy())
