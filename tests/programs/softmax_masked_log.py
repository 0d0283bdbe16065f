"""ListNet's loss on padded lists: the scores of padded documents are masked with -inf before the softmax, so the
softmax is 0 there and its log -inf; the loss multiplies it by the true distribution's 0."""

import numpy as np
import tensorflow as tf

scores = tf.Variable(np.random.default_rng(0).normal(size=(2, 5)).astype("float32"))
mask = tf.constant([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], tf.float32)
target = tf.constant([[0.5, 0.3, 0.2, 0.0, 0.0], [0.4, 0.3, 0.2, 0.1, 0.0]])


@tf.function
def loss():
    masked = tf.where(mask > 0, scores, tf.fill(tf.shape(scores), -np.inf))  # MASK
    p_pred = tf.nn.softmax(masked, axis=-1)
    return -tf.reduce_sum(target * tf.math.log(p_pred))  # ORIGIN


print(loss().numpy())
