"""Tabular regression as pandas tutorials write it: read a CSV into a DataFrame, add a derived column, fit on
``df[features]``. The derived column divides by a count that is 0 for a few stores: +inf in those rows."""

import keras
import pandas as pd

from pyadapter import NanGuard

keras.utils.set_random_seed(0)
df = pd.read_csv("stores.csv")
df["spend_per_order"] = df["marketing"] / df["orders"]  # CHANGE: stores with no orders give +inf
features = ["size", "staff", "marketing", "spend_per_order"]
target = "revenue"

model = keras.Sequential(
    [keras.Input((len(features),)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
)
model.compile(optimizer="adam", loss="mse")
model.fit(df[features], df[target], batch_size=32, epochs=3, verbose=0, callbacks=[NanGuard("captures")])
