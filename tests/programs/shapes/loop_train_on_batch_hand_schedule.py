"""Hand-written training loop with train_on_batch and a manual warmup learning-rate schedule."""
import math

import keras
import numpy as np
from keras import layers

from pyadapter import NanGuard

BASE_LR = 0.01
WARMUP_STEPS = 200
TOTAL_STEPS = 1500
BATCH = 32
DECAY_RATE = 0.005


def lr_at(step):
    # linear warmup, then exponential decay
    if step < WARMUP_STEPS:
        return BASE_LR * (step + 1) / WARMUP_STEPS
    return BASE_LR * math.exp(DECAY_RATE * (step - WARMUP_STEPS))  # BUG: lost the minus sign, the rate grows


rng = np.random.default_rng(1)
X = rng.normal(size=(5000, 10)).astype("float32")
Y = (np.sin(X[:, 0]) + X[:, 1] * X[:, 2] + 0.1 * rng.normal(size=5000)).astype("float32")[:, None]

model = keras.Sequential([
    keras.Input(shape=(10,)),
    layers.Dense(64, activation="tanh"),
    layers.Dense(64, activation="tanh"),
    layers.Dense(1),
])
model.compile(optimizer=keras.optimizers.SGD(learning_rate=BASE_LR, momentum=0.9), loss="mse")

guard = NanGuard("captures")
keras.callbacks.CallbackList([guard], model=model).on_train_begin()

step = 0
while step < TOTAL_STEPS:
    perm = rng.permutation(len(X))
    for i in range(0, len(X) - BATCH + 1, BATCH):
        lr = lr_at(step)
        model.optimizer.learning_rate.assign(lr)  # CHANGE
        idx = perm[i:i + BATCH]
        loss = model.train_on_batch(X[idx], Y[idx])  # ORIGIN
        if step % 100 == 0:
            print(f"step {step:5d}  lr {lr:.4f}  loss {float(loss):.4f}")
        step += 1
        if model.stop_training or step >= TOTAL_STEPS:
            break
