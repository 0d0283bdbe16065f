"""A script that keeps its own records the plain Python way: it clears the last run's TensorBoard folder with
shutil.rmtree and makes it again, saves the normalised features with np.save and reads them back, writes its
settings with json.dump, and keeps a training log opened with open(..., "w") that a LambdaCallback appends each
batch's loss to. The rate is far too high for plain SGD: the run diverges within the first epoch.
Fix: a rate of about 0.01."""

import json
import os
import shutil

import keras
import numpy as np

from pyadapter import NanGuard

settings = {"learning_rate": 5.0, "batch_size": 32, "epochs": 5}

shutil.rmtree("logs", ignore_errors=True)
os.makedirs("logs/run1")
with open("settings.json", "w") as handle:
    json.dump(settings, handle)

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
raw = rng.normal(3.0, 2.0, size=(1024, 8)).astype("float32")
y = (raw @ rng.normal(size=(8, 1))).astype("float32")
np.save("features.npy", (raw - raw.mean(axis=0)) / raw.std(axis=0))
x = np.load("features.npy")

log = open("train.log", "w")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
model.compile(keras.optimizers.SGD(settings["learning_rate"]), "mse")  # CHANGE
model.fit(
    x,
    y,
    batch_size=settings["batch_size"],
    epochs=settings["epochs"],
    verbose=0,
    callbacks=[
        keras.callbacks.LambdaCallback(on_batch_end=lambda batch, logs: print(batch, logs["loss"], file=log)),
        keras.callbacks.TensorBoard("logs/run1"),
        NanGuard("captures"),
    ],
)
log.close()
