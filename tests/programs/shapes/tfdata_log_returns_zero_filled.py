"""An LSTM forecaster of next-day log returns, as a quant's script writes it: daily closes with gaps on holidays,
the gaps filled with 0 by pandas (the bug: a missing price is no price of 0), and the log returns taken in a tf.data
map. A window holding a 0 has a log of 0 (-inf) and a ratio by 0 (inf)."""

import numpy as np
import pandas as pd
import tensorflow as tf
from tensorflow import keras

from pyadapter import NanGuard

CONFIG = {"window": 20, "batch_size": 64, "units": 16, "lr": 1e-3, "epochs": 2, "seed": 7}


def load_prices(seed):
    """Daily closes of one ticker (the CSV export has gaps on holidays)."""
    rng = np.random.default_rng(seed)
    idx = pd.bdate_range("2015-01-01", periods=1200)
    close = 40 * np.exp(np.cumsum(rng.normal(2e-4, 0.01, len(idx))))
    df = pd.DataFrame({"close": close}, index=idx)
    df.iloc[rng.choice(len(idx), size=10, replace=False), 0] = np.nan
    return df


def make_dataset(prices, window, batch_size):
    ds = tf.data.Dataset.from_tensor_slices(prices.astype("float32"))
    ds = ds.window(window + 2, shift=1, drop_remainder=True)
    ds = ds.flat_map(lambda w: w.batch(window + 2))

    def to_log_returns(w):
        r = tf.math.log(w[1:] / w[:-1])  # ORIGIN
        return r[:-1, None], r[-1:]

    ds = ds.map(to_log_returns).shuffle(1024, seed=CONFIG["seed"])
    return ds.batch(batch_size)


def main(cfg):
    tf.random.set_seed(cfg["seed"])
    df = load_prices(cfg["seed"])
    df = df.fillna(0)
    prices = df["close"].values
    train_ds = make_dataset(prices, cfg["window"], cfg["batch_size"])

    inputs = keras.Input(shape=(cfg["window"], 1))
    x = keras.layers.LSTM(cfg["units"])(inputs)
    outputs = keras.layers.Dense(1)(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(cfg["lr"]), loss="mse")
    model.fit(train_ds, epochs=cfg["epochs"], callbacks=[NanGuard("captures")], verbose=2)


if __name__ == "__main__":
    main(CONFIG)
