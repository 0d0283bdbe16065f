"""Heater power from data-logger readings (three voltages), a small regression trained with Adam and a mean absolute
error, as tutorials for noisy sensors write it. The logger writes 9.9e37 for an over-range reading, and one such
record is in the CSV. Every value stays finite (the error is absolute, so its gradient is only as large as the
reading), but Adam squares the gradient: its second moment goes +Inf, the weights stay finite (m / sqrt(Inf) is 0),
and from the next step on every update is NaN.

Run: python fit_logger_overrange.py [--skip]   (reads logger.csv; --skip: NanGuard(on_nan="skip"))
"""

import sys

import keras
import numpy as np

from pyadapter import NanGuard

data = np.loadtxt("logger.csv", delimiter=",", skiprows=1, dtype="float32")  # CHANGE
volts, power = data[:, :3], data[:, 3:]

model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mae")
guard = NanGuard("captures", on_nan="skip" if "--skip" in sys.argv else "stop")
history = model.fit(volts, power, epochs=3, batch_size=32, verbose=0, callbacks=[guard])
print("skipped steps:", len(guard.failures))
print("last loss:", history.history["loss"][-1])
