"""A listing model with two named inputs and two named outputs: photo and tabular metadata in, price and
"sold within a month" out; dicts for x and y, a loss and a loss weight per output. The metadata are
log-scaled inside the model, and one listing has its living area entered as 0.

Run: python data_dict_multi_io.py CAPTURE_DIR
"""

import sys

import keras
import numpy as np
from keras import layers, ops

from pyadapter import NanGuard

rng = np.random.default_rng(0)
n = 256
photos = rng.random((n, 12, 12, 3)).astype("float32")
meta = rng.uniform(20, 300, size=(n, 4)).astype("float32")  # area, lot, age, rooms
meta[150, 0] = 0.0  # area missing, entered as 0
price = rng.uniform(1e5, 1e6, size=(n, 1)).astype("float32")
sold = rng.integers(0, 2, size=(n, 1)).astype("float32")

photo_in = keras.Input((12, 12, 3), name="photo")
meta_in = keras.Input((4,), name="meta")
x = layers.Conv2D(8, 3, activation="relu")(photo_in)
x = layers.GlobalAveragePooling2D()(x)
m = layers.Lambda(lambda t: ops.log(t))(meta_in)  # ORIGIN
m = layers.Dense(16, activation="relu")(m)
h = layers.Concatenate()([x, m])
outputs = {"price": layers.Dense(1, name="price")(h), "sold": layers.Dense(1, activation="sigmoid", name="sold")(h)}
model = keras.Model({"photo": photo_in, "meta": meta_in}, outputs)
model.compile(
    optimizer="adam",
    loss={"price": "mse", "sold": "binary_crossentropy"},
    loss_weights={"price": 1e-10, "sold": 1.0},
)
model.fit(
    {"photo": photos, "meta": meta},
    {"price": price, "sold": sold},
    batch_size=32,
    epochs=2,
    callbacks=[NanGuard(sys.argv[1])],
    verbose=0,
)
