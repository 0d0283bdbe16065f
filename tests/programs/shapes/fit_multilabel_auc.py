"""Multi-label tagging with a hand-weighted binary cross-entropy and keras.metrics.AUC(multi_label=True)."""
import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

POS_WEIGHT = 4.0  # tags are rare (~15% positive): up-weight positives


def build_model(n_features, n_tags=6, width=64):
    inp = keras.Input(shape=(n_features,), name="features")
    h = keras.layers.Dense(width, activation="relu")(inp)
    h = keras.layers.Dense(width, activation="relu")(h)
    out = keras.layers.Dense(n_tags, activation="sigmoid", name="tags")(h)
    return keras.Model(inp, out, name="tagger")


def my_loss(y_true, y_pred):
    y_true = tf.cast(y_true, y_pred.dtype)
    pos = POS_WEIGHT * y_true * tf.math.log(y_pred)
    neg = (1.0 - y_true) * tf.math.log(1.0 - y_pred)  # ORIGIN: sigmoid rounds to 1.0, log(0)
    return -tf.reduce_mean(pos + neg, axis=-1)


keras.utils.set_random_seed(7)
rng = np.random.default_rng(7)
n = 3000
X = rng.normal(size=(n, 20)).astype("float32")
W = rng.normal(size=(20, 6)).astype("float32")
Y = ((X @ W) > 4.0).astype("float32")

model = build_model(X.shape[1])
model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=my_loss,
              metrics=[keras.metrics.AUC(multi_label=True, name="auc")])
hist = model.fit(X, Y, epochs=30, batch_size=64, validation_split=0.1, verbose=0,
                 callbacks=[NanGuard("captures")])
