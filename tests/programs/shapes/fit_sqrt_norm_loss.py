"""A loss written as a norm, sqrt(y_pred^2), differentiated at 0 on an all-zero row: the loss stays finite while
its gradient is NaN (step 3)."""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

x = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
x[27] = 0.0
y = np.ones((64, 1), "float32")


def norm_loss(y_true, y_pred):
    return tf.reduce_mean(tf.sqrt(tf.square(y_pred)))


model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, use_bias=False)])
model.compile(optimizer="sgd", loss=norm_loss)
model.fit(x, y, batch_size=8, shuffle=False, epochs=1, verbose=0, callbacks=[NanGuard("captures")])
