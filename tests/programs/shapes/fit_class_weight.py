"""keras.io's "Imbalanced classification" habit: class weights by hand, total / (n_classes * count). The labels are
1-based in the raw data (a covertype-like table) and are made 0-based after the counts: class 0 has count 0, its
weight is inf, and every class-0 row's sample weight makes the loss inf at the first step.
Fix: count the labels fit trains on (np.bincount(targets - 1))."""

import keras
import numpy as np

from pyadapter import NanGuard

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
features = rng.normal(size=(2048, 12)).astype("float32")
targets = rng.choice([1, 2, 3, 4], size=2048, p=[0.6, 0.25, 0.1, 0.05])

n_classes = 4
counts = np.bincount(targets, minlength=n_classes)
total = len(targets)
class_weight = {i: total / (n_classes * counts[i]) for i in range(n_classes)}  # CHANGE
print("class weights:", class_weight)

targets = targets - 1  # Keras wants 0-based labels

model = keras.Sequential(
    [
        keras.Input((12,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(n_classes, activation="softmax"),
    ]
)
model.compile(keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(
    features,
    targets,
    batch_size=256,
    epochs=3,
    validation_split=0.2,
    class_weight=class_weight,
    callbacks=[NanGuard("captures")],
    verbose=2,
)
