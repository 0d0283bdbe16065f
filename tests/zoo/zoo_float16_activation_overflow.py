"""Zoo: a hidden layer's activations pass 65504 under mixed_float16 (float32 would hold them).

A power-demand regression follows the mixed-precision guide: ``mixed_float16`` as the global policy, a float32
output layer, and ``compile`` wraps the optimizer in a ``LossScaleOptimizer``. The inputs are a week of hourly
loads of industrial sites in kilowatts (4,000-15,000 each, 168 of them) and the target is the week's peak. The
first ``Dense`` layer computes in float16, whose largest value is 65504: once the loss scale has settled and the
weights grow towards targets in the tens of thousands, a unit's output passes 65504 and becomes inf (about 30
steps in), and the loss is inf. The loss scale optimizer does not help: it skips steps with overflowing
gradients, but the forward pass itself is inf. In float32 the same activations are harmless.
Fix: keep that layer in float32 (``dtype="float32"``), or scale the inputs and targets.
"""
# CAUSE: precision: a Dense layer's outputs pass float16's 65504; float32 would hold them

from __future__ import annotations

import os
import sys

import keras
import numpy as np

from pyadapter import NanGuard

HOURS = 168


def make_loads(n: int = 2048, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.uniform(4000.0, 15000.0, size=(n, 1))  # kW, one industrial site per row
    shape = 1.0 + 0.4 * np.sin(np.linspace(0.0, 2.0 * np.pi, HOURS))[None, :]
    x = base * shape + rng.normal(0.0, 200.0, size=(n, HOURS))
    y = 1.5 * x.max(axis=1, keepdims=True) + rng.normal(0.0, 50.0, size=(n, 1))
    return x.astype("float32"), y.astype("float32")


keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)
x, y = make_loads()
model = keras.Sequential(
    [
        keras.Input(shape=(HOURS,)),
        keras.layers.Dense(64, activation="relu"),  # ORIGIN: computes in float16; its outputs pass 65504 as the weights grow
        keras.layers.Dense(1, dtype="float32"),  # outputs in float32, as the guide says
    ]
)
model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")  # becomes a LossScaleOptimizer(Adam)
history = model.fit(
    x, y, batch_size=32, epochs=3, verbose=0,
    callbacks=[NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))],
)

losses = history.history.get("loss", [])
weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
non_finite = bool(model.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
sys.exit(1 if non_finite else 0)
