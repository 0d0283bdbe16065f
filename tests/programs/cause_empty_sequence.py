"""Attention pooling over padded token sequences, written the textbook way: padding positions get -inf before the
softmax. One record is an empty sequence (every token is padding), so its row of scores is -inf throughout and the
softmax takes exp(-inf - -inf) = NaN. The -inf constant is deliberate; the Softmax is where NaN is made.
Fix: leave out empty sequences, or mask with a large negative number instead of -inf."""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

keras.utils.set_random_seed(0)


class MaskedAttentionPool(keras.layers.Layer):
    def build(self, input_shape):
        self.query = self.add_weight(shape=(input_shape[-1],), name="query")

    def call(self, tokens):
        mask = tf.reduce_any(tf.not_equal(tokens, 0.0), axis=-1)  # padding tokens are all zeros
        scores = tf.where(mask, tf.einsum("btd,d->bt", tokens, self.query), -np.inf)
        weights = tf.nn.softmax(scores, axis=-1)  # ORIGIN
        return tf.einsum("bt,btd->bd", weights, tokens)


rng = np.random.default_rng(0)
tokens = rng.normal(size=(320, 10, 8)).astype("float32")
for i, length in enumerate(rng.integers(1, 11, size=320)):
    tokens[i, length:] = 0.0
tokens[203] = 0.0  # an empty sequence
targets = rng.normal(size=(320, 1)).astype("float32")
model = keras.Sequential([keras.Input((10, 8)), MaskedAttentionPool(), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(tokens, targets, batch_size=32, epochs=1, shuffle=False, callbacks=[NanGuard("captures")], verbose=0)
