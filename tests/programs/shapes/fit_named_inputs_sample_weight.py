"""Claim-frequency model: numeric features + a categorical region embedding, weighted by policy exposure, fed to
fit as a dict of named inputs. The first input by name ("cat", a region code) repeats its rows, and the bad
weight's row was told by its place in the shuffled order ("index 980 ... find the row by its values", of a NaN
weight); the numeric input tells the rows apart.
"""
import keras
import numpy as np
import pandas as pd
from keras import layers

from pyadapter import NanGuard


def load_policies(n=5000, seed=3):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "driver_age": rng.integers(18, 85, n),
        "vehicle_age": rng.integers(0, 20, n),
        "bonus_malus": rng.integers(50, 150, n),
        "density": rng.lognormal(6, 1.5, n),
        "region": rng.choice(["R11", "R24", "R52", "R53", "R82", "R93"], n),
        "exposure": rng.uniform(0.05, 1.0, n),
    })
    # a few policies came from the legacy system without an exposure
    df.loc[rng.choice(n, 12, replace=False), "exposure"] = np.nan
    df["claim"] = (rng.uniform(size=n) < 0.1 * df["exposure"].fillna(0.5)).astype("float32")
    return df


df = load_policies()
num_cols = ["driver_age", "vehicle_age", "bonus_malus", "density"]
X_num = df[num_cols].to_numpy("float32")
X_num[:, 3] = np.log(X_num[:, 3])
X_num = (X_num - X_num.mean(0)) / X_num.std(0)
regions = sorted(df["region"].unique())
X_cat = df["region"].map({r: i for i, r in enumerate(regions)}).to_numpy("int32")
y = df["claim"].to_numpy("float32")
w = df["exposure"].to_numpy("float32")  # CHANGE: 12 policies have no exposure (NaN)

num_in = keras.Input(shape=(len(num_cols),), name="num")
cat_in = keras.Input(shape=(), dtype="int32", name="cat")
emb = layers.Embedding(len(regions), 4)(cat_in)
h = layers.Concatenate()([num_in, emb])
h = layers.Dense(32, activation="relu")(h)
h = layers.Dense(16, activation="relu")(h)
out = layers.Dense(1, activation="sigmoid")(h)
model = keras.Model(inputs={"num": num_in, "cat": cat_in}, outputs=out)

model.compile(optimizer="adam", loss="binary_crossentropy", weighted_metrics=["AUC"])
model.fit({"num": X_num, "cat": X_cat}, y, sample_weight=w,
          batch_size=256, epochs=2, validation_split=0.2, verbose=0,
          callbacks=[NanGuard("captures")])
