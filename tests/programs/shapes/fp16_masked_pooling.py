"""A review classifier under mixed_float16 with attention pooling written by hand: padded positions get a score of
-1e9 before the softmax, as float32 code usually writes it. float16's largest value is 65504, so -1e9 is -inf
there, and a review that is all padding (an empty review) gets a softmax over -inf only: 0 / 0 at the first step.
The same line in float32 gives the empty review even weights."""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)


class AttentionPooling(keras.layers.Layer):
    def build(self, input_shape):
        self.query = self.add_weight(shape=(input_shape[0][-1], 1), name="query")

    def call(self, inputs):
        hidden, token_ids = inputs
        scores = tf.matmul(hidden, self.query)[..., 0]
        scores = tf.where(token_ids > 0, scores, tf.ones_like(scores) * -1e9)  # CHANGE
        weights = tf.nn.softmax(scores, axis=-1)
        return tf.reduce_sum(weights[..., None] * hidden, axis=1)


rng = np.random.default_rng(0)
reviews = rng.integers(1, 500, size=(256, 20)).astype("int32")
reviews[:, 12:] = 0  # padded to 20 tokens
reviews[37] = 0  # an empty review
labels = rng.integers(0, 2, size=(256, 1)).astype("float32")

tokens = keras.Input(shape=(20,), dtype="int32")
hidden = keras.layers.Embedding(500, 16)(tokens)
pooled = AttentionPooling()([hidden, tokens])
output = keras.layers.Dense(1, activation="sigmoid", dtype="float32")(pooled)
model = keras.Model(tokens, output)
model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
model.fit(reviews, labels, batch_size=64, epochs=2, shuffle=False, verbose=0, callbacks=[NanGuard("captures")])
