"""A classifier under Keras's mixed_float16 policy, its output a softmax Dense layer and its loss written by hand as
``-log(p[label])`` (the probabilities "are what the model outputs"). The softmax runs in float16, where a
probability below 6e-8 is 0; Keras's loss casts it to float32 only after, and the log takes 0: the loss is inf at
the first step. The Log is float32: the cause was "op: the Log op got 1 zero ... tf.math.log(tf.maximum(x,
1e-7))", a clamp that leaves those rows without a gradient. The output layer is the line to change.
"""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = (rng.normal(size=(512, 20)) * 6.0).astype("float32")
y = rng.integers(0, 10, size=512)


def sparse_cross_entropy(y_true, y_pred):
    # y_pred are the softmax probabilities of the model
    p = tf.gather(y_pred, tf.cast(tf.reshape(y_true, [-1]), tf.int32), axis=1, batch_dims=1)
    return tf.reduce_mean(-tf.math.log(p))  # ORIGIN


inputs = keras.Input((20,))
hidden = keras.layers.Dense(64, activation="relu")(inputs)
outputs = keras.layers.Dense(10, activation="softmax")(hidden)  # CHANGE
model = keras.Model(inputs, outputs)
model.compile(optimizer="adam", loss=sparse_cross_entropy)
model.fit(x, y, batch_size=64, epochs=3, verbose=0, callbacks=[NanGuard("captures")])
