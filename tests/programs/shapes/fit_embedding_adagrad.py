"""A rating model of a recommender tutorial's shape: user and item Embeddings, a dot product, Adagrad (as the
TensorFlow Recommenders tutorials train), and a squared log error written by hand of a linear output, which is
negative for some pairs from the first step. The embeddings' gradients are IndexedSlices."""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

rng = np.random.default_rng(3)
n_users, n_items, n = 300, 200, 4096
users = rng.integers(0, n_users, n).astype("int32")
items = rng.integers(0, n_items, n).astype("int32")
ratings = rng.integers(1, 6, n).astype("float32")

user_in = keras.Input(shape=(), dtype="int32", name="user")
item_in = keras.Input(shape=(), dtype="int32", name="item")
u = keras.layers.Embedding(n_users, 16)(user_in)
v = keras.layers.Embedding(n_items, 16)(item_in)
score = keras.layers.Dot(axes=1)([u, v])
model = keras.Model([user_in, item_in], score)


def squared_log_error(y_true, y_pred):
    return tf.reduce_mean(tf.square(tf.math.log(y_pred[:, 0]) - tf.math.log(y_true)))  # ORIGIN


model.compile(optimizer=keras.optimizers.Adagrad(0.1), loss=squared_log_error)
model.fit([users, items], ratings, batch_size=256, epochs=2, callbacks=[NanGuard("captures")], verbose=2)
