"""Training from a Python generator that parses a sensor log line by line (`fit(generator, steps_per_epoch=...)`,
with `validation_data`). One line of the log reads "nan" for a reading the sensor dropped; the generator yields
it as it is, so the batch holding it is NaN before any op of the step. The line to change is where the generator
yields its batch (filter or repair the record there).

Run: python data_generator_records.py CAPTURE_DIR
"""

import os
import sys
import tempfile

import keras
import numpy as np

from pyadapter import NanGuard

log = os.path.join(tempfile.mkdtemp(), "sensors.log")
rng = np.random.default_rng(5)
with open(log, "w") as out:
    for i in range(2000):
        values = rng.normal(size=6)
        fields = [f"{v:.4f}" for v in values]
        if i == 700:
            fields[3] = "nan"  # a dropped reading
        out.write(",".join(fields) + f",{values.sum():.4f}\n")


def read_batches(path, batch_size=32):
    while True:
        with open(path) as lines:
            rows = []
            for line in lines:
                rows.append([float(v) for v in line.split(",")])
                if len(rows) == batch_size:
                    batch = np.array(rows, dtype="float32")
                    rows = []
                    yield batch[:, :6], batch[:, 6:]  # ORIGIN


x_val = rng.normal(size=(64, 6)).astype("float32")
y_val = x_val.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
model.fit(
    read_batches(log),
    steps_per_epoch=20,
    epochs=3,
    validation_data=(x_val, y_val),
    callbacks=[NanGuard(sys.argv[1])],
    verbose=0,
)
