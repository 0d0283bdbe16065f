# Time series forecasting in the style of tensorflow.org's "Time series forecasting" tutorial,
# but the raw features (pressure ~1000 hPa, load ~5000 kW, the "Date Time" column as Unix seconds)
# are fed unnormalized to a relu LSTM (machinelearningmastery-style LSTM(activation="relu")).
import keras
import numpy as np

from pyadapter import NanGuard

rng = np.random.default_rng(0)
n = 1000
t = np.arange(n, dtype=np.float32)
pressure = 1000.0 + 10.0 * np.sin(t / 24.0) + rng.normal(0, 1, n)
load = 5000.0 + 2000.0 * np.sin(t / 50.0) + rng.normal(0, 100, n)
timestamp_s = 1.7e9 + t * 3600.0
features = np.stack([pressure, load, timestamp_s], axis=1).astype(np.float32)
targets = features[:, 1]  # predict the load

# FIX: features are not normalized ((features - train_mean) / train_std, and the timestamp
# turned into sin/cos of day/year as in the tutorial); the activations blow up and the loss overflows.
sequence_length = 24
ds = keras.utils.timeseries_dataset_from_array(
    data=features[:-sequence_length],
    targets=targets[sequence_length:],
    sequence_length=sequence_length,
    batch_size=32,
)

inputs = keras.Input(shape=(sequence_length, 3))
x = keras.layers.LSTM(32, activation="relu", return_sequences=True)(inputs)
x = keras.layers.LSTM(32, activation="relu")(x)
outputs = keras.layers.Dense(1)(x)
model = keras.Model(inputs, outputs)
model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3), loss="mse", metrics=["mae"])

history = model.fit(ds, epochs=2, callbacks=[NanGuard("captures")])
