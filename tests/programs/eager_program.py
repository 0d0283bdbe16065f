"""Plain eager TensorFlow, no tf.function: dividing by a tensor of zeros makes +inf, then NaN."""

import tensorflow as tf

values = tf.constant([1.0, 2.0, 3.0])
zeros = values * 0.0
ratios = values / zeros  # ORIGIN
spread = tf.reduce_sum(ratios) - ratios[0]
print(spread.numpy())
