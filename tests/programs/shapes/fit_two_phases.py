"""Transfer learning as keras.io's guide teaches it (https://keras.io/guides/transfer_learning/): train a new head
on a frozen base, then unfreeze the base, compile again with another optimizer and fine-tune the whole model. The
same NanGuard list goes into both fits, as one writes it. The fine-tuning's learning rate is far too high for
plain SGD on this regression: the run diverges in a few steps of the second fit.
Fix: a fine-tuning rate of about 1e-3 (or Adam at 1e-5, as the guide does)."""

import keras
import numpy as np

from pyadapter import NanGuard

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 16)).astype("float32")
y = x[:, :1] * 2.0 + 0.5

base = keras.Sequential(
    [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(32, activation="relu")],
    name="base",
)
inputs = keras.Input((16,))
outputs = keras.layers.Dense(1)(base(inputs, training=False))
model = keras.Model(inputs, outputs)
callbacks = [NanGuard("captures")]

base.trainable = False
model.compile(keras.optimizers.Adam(1e-3), "mse")
model.fit(x, y, batch_size=32, epochs=3, callbacks=callbacks)
print("head trained, loss:", model.evaluate(x, y, verbose=0))

base.trainable = True
model.compile(keras.optimizers.SGD(50.0), "mse")
model.fit(x, y, batch_size=32, epochs=3, verbose=0, callbacks=callbacks)
print("fine-tuned weights finite:", all(np.isfinite(w).all() for w in model.get_weights()))
