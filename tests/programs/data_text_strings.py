"""A review classifier fed raw strings: `TextVectorization` inside the model, a tf.data pipeline of
(text, label) pairs, `class_weight` for the rarer class. Its own mean over the tokens divides by the number of
tokens, which is 0 for a review that standardization leaves empty (only punctuation).

Run: python data_text_strings.py CAPTURE_DIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

reviews = [
    "great movie, loved it", "terrible plot and bad acting", "what a wonderful film",
    "boring and way too long", "i would watch it again", "the worst thing i have seen",
    "brilliant acting and a clever story", "not worth the ticket", "¡qué película tan buena!",
] * 20
labels = np.array([1, 0, 1, 0, 1, 0, 1, 0, 1] * 20)
reviews[77] = "!!! ..."  # a scraped review with no words

vectorize = keras.layers.TextVectorization(max_tokens=300, output_sequence_length=10)
vectorize.adapt(reviews)


class MeanOverTokens(keras.layers.Layer):
    def call(self, embedded, token_ids):
        mask = tf.cast(token_ids != 0, embedded.dtype)[..., None]
        return tf.reduce_sum(embedded * mask, axis=1) / tf.reduce_sum(mask, axis=1)  # ORIGIN


text = keras.Input(shape=(), dtype="string")
tokens = vectorize(text)
vectors = keras.layers.Embedding(300, 16)(tokens)
pooled = MeanOverTokens()(vectors, tokens)
score = keras.layers.Dense(1, activation="sigmoid")(pooled)
model = keras.Model(text, score)
model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])

train = tf.data.Dataset.from_tensor_slices((reviews, labels)).batch(16)
model.fit(train, epochs=2, class_weight={0: 1.0, 1: 1.5}, callbacks=[NanGuard(sys.argv[1])], verbose=0)
