"""House prices in thousands (143 to 680) regressed with MSE by an MLP under SGD with momentum 0.9, the rate given
on the command line (``python fit_sgd_unscaled_targets.py --lr 0.5``): the run diverges in three steps.

The window search halves the rate until its 4-step window stays finite (0.00195) and suggests half of it. On these
targets the loss does not fall steadily with the rate: 9.77e-4 diverges (in the window and in training) where
0.00195 and 4.88e-4 train. Fix: scale the targets (and a rate that trains).
"""

import argparse

import keras
import numpy as np
from keras import layers

from pyadapter import NanGuard

parser = argparse.ArgumentParser(description="train the house price regressor")
parser.add_argument("--lr", type=float, required=True, help="SGD learning rate")
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
n = 4096
sqft = rng.uniform(500, 4000, n)
rooms = rng.integers(1, 8, n).astype("float64")
age = rng.uniform(0, 80, n)
dist = rng.uniform(0.5, 40, n)
x = np.stack([sqft / 1000.0, rooms, age / 10.0, dist / 10.0], axis=1).astype("float32")
y = (150 * x[:, 0] + 20 * x[:, 1] - 5 * x[:, 2] - 8 * x[:, 3] + rng.normal(0, 10, n)).astype("float32").reshape(-1, 1)
x_val, y_val, x_train, y_train = x[:409], y[:409], x[409:], y[409:]

inputs = keras.Input(shape=(4,), name="features")
hidden = layers.Dense(32, activation="relu", name="hidden1")(inputs)
hidden = layers.Dense(32, activation="relu", name="hidden2")(hidden)
outputs = layers.Dense(1, name="price")(hidden)
model = keras.Model(inputs, outputs, name="house_price_regressor")
optimizer = keras.optimizers.SGD(learning_rate=args.lr, momentum=0.9)  # CHANGE
model.compile(optimizer=optimizer, loss="mse", metrics=["mae"])
model.fit(  # ORIGIN
    x_train,
    y_train,
    validation_data=(x_val, y_val),
    epochs=args.epochs,
    batch_size=64,
    callbacks=[NanGuard("captures")],
)
