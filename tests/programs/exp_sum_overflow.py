"""A contrastive loss's softmax written by hand, at a small temperature: every exp(sim / tau) is finite (the largest
sim / tau is 87.7, below float32's 88.7), but a row holds four near-identical embeddings and its sum of exps passes
3.4e38. The Sum makes the inf, not the Exp."""

import tensorflow as tf


@tf.function
def contrastive_loss(z, tau):
    z = tf.math.l2_normalize(z, axis=1)
    sim = tf.matmul(z, z, transpose_b=True) / tau  # DIVIDE
    exp_sim = tf.exp(sim)  # EXP
    denom = tf.reduce_sum(exp_sim, axis=1)  # ORIGIN
    return -tf.reduce_mean(tf.math.log(tf.linalg.diag_part(exp_sim) / denom))


embeddings = tf.constant([[1.0, 0.0], [1.0, 0.01], [1.0, 0.02], [1.0, 0.03], [0.0, 1.0]])
print(contrastive_loss(embeddings, tf.constant(1 / 87.7)).numpy())
