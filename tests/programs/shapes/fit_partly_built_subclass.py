"""A box regressor written as keras.io's RetinaNet is: a keras.Model subclass whose head is a Sequential built in
``__init__`` (it starts with keras.Input) while its backbone is built on the first call. The box targets are
encoded in the loss, ``log(w / anchor_w)``, and the batches are padded with boxes of width 0: log(0). NanGuard
built the optimizer on the variables that existed at train begin (the head's) and the first update refused the
backbone's: "Unknown variable", no bundle.
"""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

ANCHOR_W = 16.0


class BoxRegressor(keras.Model):
    def __init__(self, num_outputs=2, **kwargs):
        super().__init__(**kwargs)
        self.backbone = keras.Sequential(
            [keras.layers.Dense(32, activation="relu"), keras.layers.Dense(16, activation="relu")]
        )
        self.head = keras.Sequential([keras.Input(shape=(16,)), keras.layers.Dense(num_outputs)])

    def call(self, x, training=False):
        return self.head(self.backbone(x, training=training))


def box_loss(y_true, y_pred):
    target_w = tf.math.log(y_true[:, 0] / ANCHOR_W)  # ORIGIN: padded boxes have width 0
    target_h = tf.math.log(y_true[:, 1] / ANCHOR_W)
    return tf.reduce_mean(tf.abs(y_pred[:, 0] - target_w) + tf.abs(y_pred[:, 1] - target_h))


rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
boxes = rng.uniform(4.0, 64.0, size=(256, 2)).astype("float32")
boxes[200:] = 0.0  # images with fewer objects, padded with empty boxes
model = BoxRegressor(num_outputs=2)
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=box_loss)
model.fit(x, boxes, batch_size=32, epochs=2, shuffle=False, verbose=0, callbacks=[NanGuard("captures")])
