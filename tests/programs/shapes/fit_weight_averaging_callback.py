"""An image-ish classifier with periodic weight averaging written as a Keras callback, as a tester wrote it (s41e
p5): every 20 batches the callback folds the weights into a running average and sets the model to it, dividing by
a count that starts at 0. The weights are inf after batch 19, between two updates the guard checked finite; the cause
named the learning rate ("an update made the weights non-finite"), and the rate it offered failed at the same step.
NumPy warned at the callback's division."""

import keras
import numpy as np

from pyadapter import NanGuard

keras.utils.set_random_seed(11)


class PeriodicAveraging(keras.callbacks.Callback):
    """Every `every` batches fold the current weights into a running average and continue from the average."""

    def __init__(self, every=20):
        super().__init__()
        self.every = every
        self.n_averaged = 0

    def on_train_begin(self, logs=None):
        self.avg = [np.array(w) for w in self.model.get_weights()]

    def on_train_batch_end(self, batch, logs=None):
        if (batch + 1) % self.every != 0:
            return
        weights = self.model.get_weights()
        self.avg = [a + (w - a) / self.n_averaged for a, w in zip(self.avg, weights)]  # CHANGE
        self.n_averaged += 1
        self.model.set_weights(self.avg)


rng = np.random.default_rng(11)
x = rng.normal(size=(3000, 8, 8, 1)).astype("float32")
y = (x[:, :4].mean(axis=(1, 2, 3)) > x[:, 4:].mean(axis=(1, 2, 3))).astype("int32")

model = keras.Sequential(
    [
        keras.Input(shape=(8, 8, 1)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(2, activation="softmax"),
    ]
)
model.compile(
    optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
    loss="sparse_categorical_crossentropy",
    metrics=["accuracy"],
)
model.fit(x, y, batch_size=32, epochs=3, callbacks=[PeriodicAveraging(every=20), NanGuard("captures")])
