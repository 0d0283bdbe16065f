"""A DQN-style loop: one short ``fit`` per environment step, the guard created once, and the loop ends when the
guard stops training (``if model.stop_training: break``, as the README advises for loops of fit calls). The
environment's reward is ``1 / distance``, +inf when the agent reaches the goal at iteration 3."""

import keras
import numpy as np

from pyadapter import NanGuard

rng = np.random.default_rng(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("adam", "mse")
guard = NanGuard("captures")
for iteration in range(10):
    states = rng.normal(size=(8, 4)).astype("float32")
    distance = 3 - iteration
    with np.errstate(divide="ignore"):
        reward = np.float32(1.0) / np.float32(distance)  # CHANGE: +inf at the goal
    targets = np.full((8, 1), reward, dtype="float32")
    model.fit(states, targets, epochs=1, verbose=0, callbacks=[guard])
    if model.stop_training:
        print("stopped at iteration", iteration)
        break
