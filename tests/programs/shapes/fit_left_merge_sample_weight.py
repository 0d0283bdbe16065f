"""A churn model with per-region sample weights joined from a weights table (s42f p3): pandas reads a clean CSV,
a left merge with a table that has no row for region "islands" makes those customers' weight NaN, and the weights
are sliced into a shuffled tf.data pipeline with the features. The CSV has no missing field: the merge makes it."""
import keras
import numpy as np
import pandas as pd
import tensorflow as tf
from keras import layers

from pyadapter import NanGuard

rng = np.random.default_rng(3)
keras.utils.set_random_seed(3)
N = 640
regions = rng.choice(["north", "south", "east", "west"], size=N)
regions[[5, 301, 502]] = "islands"
df = pd.DataFrame(
    {"region": regions, "tenure": rng.integers(1, 72, N), "monthly": rng.normal(70, 20, N), "tickets": rng.poisson(1.5, N)}
)
df["churn"] = ((df.tickets > 2) | (df.tenure < 6)).astype("float32")
df.to_csv("customers.csv", index=False)

df = pd.read_csv("customers.csv")
region_w = pd.DataFrame({"region": ["north", "south", "east", "west"], "w": [1.0, 1.0, 1.5, 2.0]})
df = df.merge(region_w, on="region", how="left")  # CHANGE: no row for "islands": its weight is NaN

feats = ["tenure", "monthly", "tickets"]
X = ((df[feats] - df[feats].mean()) / df[feats].std()).values.astype("float32")
y = df["churn"].values.astype("float32")
sw = df["w"].values.astype("float32")
train_ds = tf.data.Dataset.from_tensor_slices((X, y, sw)).shuffle(N, seed=3).batch(32)

model = keras.Sequential([keras.Input((3,)), layers.Dense(8, activation="relu"), layers.Dense(1, activation="sigmoid")])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy")
model.fit(train_ds, epochs=2, callbacks=[NanGuard("captures")], verbose=0)
