"""A script with the callbacks its author passes to every fit (keras.io's guides): TerminateOnNaN,
ReduceLROnPlateau, ModelCheckpoint, EarlyStopping, CSVLogger and TensorBoard, beside NanGuard. A first phase trains
a head on a frozen base and saves it; then the whole model is compiled again and fine-tuned at a rate far too high
for plain SGD: the run diverges in a few steps of the second fit.
Fix: a fine-tuning rate of about 1e-3."""

import keras
import numpy as np

from pyadapter import NanGuard

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 16)).astype("float32")
y = x[:, :1] * 2.0 + 0.5

base = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu")], name="base")
inputs = keras.Input((16,))
model = keras.Model(inputs, keras.layers.Dense(1)(base(inputs)))


def callbacks(phase):
    return [
        keras.callbacks.TerminateOnNaN(),
        keras.callbacks.ReduceLROnPlateau(patience=2),
        keras.callbacks.ModelCheckpoint(f"best_{phase}.keras", save_best_only=True),
        keras.callbacks.EarlyStopping(patience=3),
        keras.callbacks.CSVLogger(f"log_{phase}.csv"),
        keras.callbacks.TensorBoard(f"logs/{phase}"),
        NanGuard("captures"),
    ]


base.trainable = False
model.compile(keras.optimizers.Adam(1e-3), "mse")
model.fit(x, y, batch_size=32, epochs=2, validation_split=0.2, verbose=0, callbacks=callbacks("head"))
model.save("head.keras")

base.trainable = True
model.compile(keras.optimizers.SGD(50.0), "mse")
model.fit(x, y, batch_size=32, epochs=3, validation_split=0.2, verbose=0, callbacks=callbacks("fine_tune"))
model.save("fine_tuned.keras")
