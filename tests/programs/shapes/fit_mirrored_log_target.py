"""Insurance claim severity regression, data-parallel with MirroredStrategy (two logical CPUs stand in for two
GPUs), fit on a shuffled tf.data pipeline; written by a helper as its users write it. Claims closed without payment
are recorded with amount 0, and the target is np.log of the amount: -inf in the data, at the line NumPy warned at.
"""
import keras
import numpy as np
import pandas as pd
import tensorflow as tf
from keras import layers

from pyadapter import NanGuard

cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])

GLOBAL_BATCH = 128
EPOCHS = 2


def load_claims(n=20000, seed=7):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "driver_age": rng.integers(18, 85, n),
        "vehicle_age": rng.integers(0, 25, n),
        "vehicle_value": rng.lognormal(9.5, 0.5, n),
        "region": rng.integers(0, 10, n),
        "prior_claims": rng.poisson(0.4, n),
    })
    severity = np.exp(6 + 0.01 * (60 - df.driver_age) + 0.3 * df.prior_claims + rng.normal(0, 0.5, n))
    # claims closed without payment are recorded with amount 0
    severity[rng.random(n) < 0.002] = 0.0
    df["claim_amount"] = severity
    return df


df = load_claims()
features = df[["driver_age", "vehicle_age", "vehicle_value", "region", "prior_claims"]].astype("float32")
features = (features - features.mean()) / features.std()
target = np.log(df["claim_amount"]).astype("float32")  # ORIGIN: closed claims have amount 0 -> log(0) = -inf
# FIX: target = np.log1p(df["claim_amount"]).astype("float32")   (or drop the zero-amount claims)

ds = (tf.data.Dataset.from_tensor_slices((features.values, target.values[:, None]))
      .shuffle(20000, seed=0)
      .batch(GLOBAL_BATCH)
      .prefetch(tf.data.AUTOTUNE))

strategy = tf.distribute.MirroredStrategy()
print("replicas:", strategy.num_replicas_in_sync)

with strategy.scope():
    model = keras.Sequential([
        keras.Input(shape=(5,)),
        layers.Dense(64, activation="relu"),
        layers.Dense(64, activation="relu"),
        layers.Dense(1),
    ])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse", metrics=["mae"])

model.fit(ds, epochs=EPOCHS, callbacks=[NanGuard("captures")])
