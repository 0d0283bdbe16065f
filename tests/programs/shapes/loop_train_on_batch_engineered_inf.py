"""A house-price notebook's loop, as a script: features engineered with pandas (a ratio by a size that unknown
listings hold as 0: inf, silently), robust scaling, and a loop of train_on_batch that installs NanGuard itself
with ``CallbackList([guard], model=model).on_train_begin()``, as the README shows for such loops."""

import keras
import numpy as np
import pandas as pd

from pyadapter import NanGuard

np.random.seed(7)
n = 3000
df = pd.DataFrame(
    {
        "sqft": np.random.normal(1800, 600, n).clip(400),
        "beds": np.random.randint(1, 6, n),
        "age": np.random.uniform(0, 100, n),
        "lot": np.random.lognormal(8.5, 0.5, n),
    }
)
df.loc[[1234, 2321], "sqft"] = 0  # listings of unknown size are entered as 0
df["price"] = (120 * df.sqft + 9000 * df.beds - 500 * df.age + np.random.normal(0, 20000, n)).clip(50000) / 1000
df["lot_ratio"] = df.lot / df.sqft  # CHANGE
feats = ["sqft", "beds", "age", "lot", "lot_ratio"]
X = df[feats].to_numpy("float32")
X = (X - np.median(X, 0)) / (np.percentile(X, 75, 0) - np.percentile(X, 25, 0))
y = (df.price.to_numpy("float32") - 200) / 70

model = keras.Sequential(
    [keras.layers.Input(shape=(len(feats),)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
)
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")

guard = NanGuard("captures")
keras.callbacks.CallbackList([guard], model=model).on_train_begin()
for epoch in range(5):
    perm = np.random.permutation(n)
    for i in range(0, n, 64):
        idx = perm[i : i + 64]
        loss = model.train_on_batch(X[idx], y[idx])  # ORIGIN
        if model.stop_training:
            break
    print(f"epoch {epoch + 1}: loss {loss:.4f}")
    if model.stop_training:
        break
