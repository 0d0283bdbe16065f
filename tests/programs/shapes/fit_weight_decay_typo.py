"""A tabular classifier with weight decay, as tensorflow.org's "Overfit and underfit" adds it, trained with SGD; the
L2 factor was typed 1e3 where 1e-3 was meant. Each step shrinks the weights by 1 - 0.01 * 2 * 1000: they flip sign
and grow x19 per step until the loss overflows. The learning rate is the usual one: the factor is what to change."""

import keras
import numpy as np

from pyadapter import NanGuard

rng = np.random.default_rng(5)
x = rng.normal(size=(2048, 12)).astype("float32")
y = (np.sin(x[:, 0]) + x[:, 1] * x[:, 2] > 0).astype("float32")

model = keras.Sequential([
    keras.Input(shape=(12,)),
    keras.layers.Dense(64, activation="elu", kernel_regularizer=keras.regularizers.l2(1e3)),  # CHANGE
    keras.layers.Dense(1),
])
model.compile(optimizer=keras.optimizers.SGD(0.01), loss=keras.losses.BinaryCrossentropy(from_logits=True))
model.fit(x, y, batch_size=64, epochs=5, verbose=0, callbacks=[NanGuard("captures")])
