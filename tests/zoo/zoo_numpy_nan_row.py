"""Zoo: a NaN row in the NumPy array passed to fit (the mean of an empty selection).

Each customer's features are the averages of their purchases (amount, items, discount), computed with NumPy from
a purchase log. One customer in the list has no purchases in the log: ``purchases[mask].mean(axis=0)`` of an
empty selection is NaN (NumPy only warns "Mean of empty slice"), so that customer's row is all NaN, and the
first batch holding it makes the loss NaN. No TensorFlow op creates the NaN: it arrives with the batch.
Fix: skip customers without purchases (or fill their row) where the features are computed.
"""
# CAUSE: data: the NaN row is in the array passed to fit, before any op

from __future__ import annotations

import os
import sys

import keras
import numpy as np

from pyadapter import NanGuard

CUSTOMERS = 600


def purchase_log(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    customer = rng.integers(0, CUSTOMERS, size=12000)
    customer[customer == 437] = 438  # customer 437 signed up but never bought anything
    amount = rng.gamma(2.0, 30.0, size=customer.size)
    items = rng.integers(1, 6, size=customer.size).astype("float64")
    discount = rng.uniform(0.0, 0.3, size=customer.size)
    return customer, np.stack([amount / 100.0, items, discount], axis=1)


def customer_features() -> tuple[np.ndarray, np.ndarray]:
    customer, purchases = purchase_log()
    rows = [purchases[customer == c].mean(axis=0) for c in range(CUSTOMERS)]  # ORIGIN: a customer without purchases: the mean of an empty slice is NaN
    x = np.array(rows, dtype="float32")
    rng = np.random.default_rng(1)
    y = (rng.random(CUSTOMERS) < 0.2).astype("float32")  # churned
    return x, y


def main() -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(0)
    x, y = customer_features()
    model = keras.Sequential(
        [keras.Input(shape=(3,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1, activation="sigmoid")]
    )
    model.compile(optimizer="adam", loss="binary_crossentropy")
    guard = NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))
    history = model.fit(x, y, batch_size=32, epochs=3, shuffle=False, verbose=0, callbacks=[guard])
    return model, history


if __name__ == "__main__":
    model, history = main()
    losses = history.history.get("loss", [])
    weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
    non_finite = bool(model.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
    print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
    sys.exit(1 if non_finite else 0)
