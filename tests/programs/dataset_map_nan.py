"""The NaN is made inside a tf.data map function (a graph of its own), then consumed by a training step."""

import tensorflow as tf


def featurize(x):
    return tf.math.log(x)  # ORIGIN


@tf.function
def step(batch):
    return tf.reduce_sum(batch * 2.0)


data = tf.constant([[1.0, 2.0], [3.0, 0.0], [5.0, 6.0]])
dataset = tf.data.Dataset.from_tensor_slices(data).map(featurize).batch(1)
for batch in dataset:
    print(float(step(batch)))
