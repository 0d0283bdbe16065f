"""A tabular classifier given mixed precision layer by layer, ``dtype=keras.mixed_precision.Policy("mixed_float16")``
on each Dense, the softmax output layer too (the mixed-precision guide keeps that one in float32). The global policy
stays float32, so Keras's categorical_crossentropy casts the float16 probabilities up to float32, and its gradient
(-y/p for a probability near 0) is cast back down to float16 past 65504 within the first epoch."""
import keras
import numpy as np
import pandas as pd
from keras import layers

from pyadapter import NanGuard

rng = np.random.default_rng(7)
n = 20000
df = pd.DataFrame({
    "age": rng.integers(18, 90, n),
    "hours_per_week": rng.integers(1, 99, n),
    "capital_gain": rng.exponential(2000, n).round(),
    "education_num": rng.integers(1, 16, n),
    "income_k": rng.gamma(2.0, 30.0, n).round(1),
})
score = 0.03 * df.age + 0.05 * df.hours_per_week + 0.0004 * df.capital_gain + 0.3 * df.education_num
df["segment"] = pd.qcut(score, 5, labels=False)
noisy = rng.random(n) < 0.05  # real labels are never clean
df.loc[noisy, "segment"] = rng.integers(0, 5, noisy.sum())

features = df.drop(columns="segment")
features = (features - features.mean()) / features.std()
X = features.values.astype("float32")
Y = keras.utils.to_categorical(df["segment"].values, 5)

policy = keras.mixed_precision.Policy("mixed_float16")
model = keras.Sequential([
    keras.Input(shape=(X.shape[1],)),
    layers.Dense(128, activation="relu", dtype=policy),
    layers.Dense(128, activation="relu", dtype=policy),
    layers.Dense(5, activation="softmax", dtype=policy),  # BUG: the output layer and its softmax in float16
])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="categorical_crossentropy", metrics=["accuracy"])
model.fit(X, Y, epochs=3, validation_split=0.2, callbacks=[NanGuard("captures")], verbose=2)  # ORIGIN
