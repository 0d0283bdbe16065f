"""Bag-of-words counts as a `tf.SparseTensor` into a functional model with a sparse Input; a custom layer adds
the log of each document's length as a feature, -inf for a document with no known words.

Run: python data_sparse.py CAPTURE_DIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

rng = np.random.default_rng(0)
n, vocab = 256, 1000
rows, cols, vals = [], [], []
for i in range(n):
    if i == 100:
        continue  # a document with no known words
    for word in rng.choice(vocab, size=rng.integers(1, 12), replace=False):
        rows.append(i)
        cols.append(word)
        vals.append(float(rng.integers(1, 4)))
counts = tf.sparse.reorder(
    tf.SparseTensor(np.stack([rows, cols], 1).astype("int64"), np.array(vals, "float32"), [n, vocab])
)
labels = rng.integers(0, 2, size=(n, 1)).astype("float32")


class LogLength(keras.layers.Layer):
    def call(self, x):
        return tf.math.log(tf.sparse.reduce_sum(x, axis=1, keepdims=True))  # ORIGIN

    def compute_output_shape(self, input_shape):
        return (input_shape[0], 1)


inputs = keras.Input(shape=(vocab,), sparse=True)
h = keras.layers.Dense(16, activation="relu")(inputs)
h = keras.layers.Concatenate()([h, LogLength()(inputs)])
out = keras.layers.Dense(1, activation="sigmoid")(h)
model = keras.Model(inputs, out)
model.compile(optimizer="adam", loss="binary_crossentropy")
data = tf.data.Dataset.from_tensor_slices((counts, labels)).batch(32)
model.fit(data, epochs=2, callbacks=[NanGuard(sys.argv[1])], verbose=0)
