"""Defect classifier for 24x24 grayscale inspection frames, fed by a PyDataset with on-the-fly augmentation.
Written by a helper trying NaN Lens as a user. A blank frame's std is 0: its standardisation is 0/0 = NaN, made by
NumPy in __getitem__ (which warns "invalid value encountered in divide" at that line), not by any TensorFlow op.
Seeded as its authors seed: fit shuffles the batches with Python's `random`, and with other draws the augmented blank
frame's mean can be inexact by an ulp, which makes its standardisation finite (in about half of the epochs)."""

import math

import keras
import numpy as np
from keras import layers

from pyadapter import NanGuard


def make_frames(n, seed):
    r = np.random.default_rng(seed)
    imgs = r.normal(120, 25, size=(n, 24, 24)).astype("float32")
    labels = r.integers(0, 3, n)
    for i, lab in enumerate(labels):  # defect types: scratch / spot / none
        if lab == 0:
            imgs[i, r.integers(0, 24), :] += 80
        elif lab == 1:
            cy, cx = r.integers(4, 20, 2)
            imgs[i, cy - 2 : cy + 2, cx - 2 : cx + 2] -= 90
    return np.clip(imgs, 0, 255), labels


class FrameSequence(keras.utils.PyDataset):
    def __init__(self, images, labels, batch_size=32, augment=False, seed=0, **kwargs):
        super().__init__(**kwargs)
        self.images, self.labels = images, labels
        self.batch_size, self.augment = batch_size, augment
        self.rng = np.random.default_rng(seed)
        self.order = np.arange(len(images))

    def __len__(self):
        return math.ceil(len(self.images) / self.batch_size)

    def __getitem__(self, idx):
        ids = self.order[idx * self.batch_size : (idx + 1) * self.batch_size]
        x = self.images[ids].copy()
        y = self.labels[ids]
        if self.augment:
            flip = self.rng.random(len(x)) < 0.5
            x[flip] = x[flip, :, ::-1]
            x = x * self.rng.uniform(0.8, 1.2, (len(x), 1, 1)) + self.rng.normal(0, 5, (len(x), 1, 1))
        # per-image standardisation (like tf.image.per_image_standardization, but without its epsilon)
        mean = x.mean(axis=(1, 2), keepdims=True)
        std = x.std(axis=(1, 2), keepdims=True)
        x = (x - mean) / std  # ORIGIN
        # CAUSE: data: frame 1250 is a blank (constant) frame from a dropped camera read, so its std is 0 and (x-mean)/std is 0/0 = NaN
        return x[..., None].astype("float32"), y

    def on_epoch_end(self):
        self.rng.shuffle(self.order)


keras.utils.set_random_seed(0)
train_x, train_y = make_frames(2400, 0)
train_x[1250] = 0.0  # dropped camera read: the loader returns a black frame
val_x, val_y = make_frames(400, 1)

train_seq = FrameSequence(train_x, train_y, augment=True, seed=3)
val_seq = FrameSequence(val_x, val_y)

model = keras.Sequential(
    [
        keras.Input((24, 24, 1)),
        layers.Conv2D(16, 3, activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(32, 3, activation="relu"),
        layers.GlobalAveragePooling2D(),
        layers.Dense(32, activation="relu"),
        layers.Dense(3, activation="softmax"),
    ]
)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(train_seq, validation_data=val_seq, epochs=4, callbacks=[NanGuard("captures")])
