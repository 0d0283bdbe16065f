"""Documents as variable-length token id lists (a `tf.RaggedTensor`), an Embedding mapped over the ragged values
and a mean over each document's tokens, in a subclassed model. An empty document has 0 tokens: 0 / 0.

Run: python data_ragged.py CAPTURE_DIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

rng = np.random.default_rng(0)
docs = [list(rng.integers(1, 500, size=rng.integers(1, 20))) for _ in range(320)]
docs[150] = []  # an empty document
scores = rng.normal(size=(320, 1)).astype("float32")


class BagOfWords(keras.Model):
    def __init__(self, vocab, dim):
        super().__init__()
        self.embed = keras.layers.Embedding(vocab, dim)
        self.head = keras.layers.Dense(1)

    def call(self, ids):
        vectors = tf.ragged.map_flat_values(self.embed, ids)  # [batch, (tokens), dim]
        mean = tf.reduce_sum(vectors, axis=1) / tf.cast(ids.row_lengths(), "float32")[:, None]  # ORIGIN
        return self.head(mean)


ids = tf.ragged.constant(docs, dtype=tf.int64)
data = tf.data.Dataset.from_tensor_slices((ids, scores)).batch(32)
model = BagOfWords(500, 8)
model.compile(optimizer="adam", loss="mse")
model.fit(data, epochs=2, callbacks=[NanGuard(sys.argv[1])], verbose=0)
