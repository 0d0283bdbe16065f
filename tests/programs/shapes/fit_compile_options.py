"""House prices with a log-error loss, trained with the usual speed knobs on compile().

Some listings have a price of 0 (not sold yet): log(0) = -inf.
Fix: drop those rows, or log1p.
"""

import argparse

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

parser = argparse.ArgumentParser()
parser.add_argument("--steps-per-execution", type=int, default=1)
parser.add_argument("--jit-compile", action="store_true")
parser.add_argument("--run-eagerly", action="store_true")
parser.add_argument("--on-nan", default="stop")
args = parser.parse_args()


def log_error(y_true, y_pred):
    return tf.reduce_mean(tf.square(tf.math.log(y_true) - y_pred), axis=-1)  # ORIGIN


keras.utils.set_random_seed(1)
rng = np.random.default_rng(1)
x = rng.normal(size=(640, 5)).astype("float32")
y = np.exp(x @ rng.normal(size=(5, 1)) * 0.3 + 3.0).astype("float32")
y[11 * 32 + 7] = 0.0  # a listing not sold yet: in batch 11 of each epoch

model = keras.Sequential(
    [
        keras.Input(shape=(5,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(1),
    ]
)
model.compile(
    optimizer=keras.optimizers.Adam(1e-3),
    loss=log_error,
    steps_per_execution=args.steps_per_execution,
    jit_compile=args.jit_compile,
    run_eagerly=args.run_eagerly,
)
guard = NanGuard("captures", on_nan=args.on_nan)
history = model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0, callbacks=[guard])

print("failures:", [f.step for f in guard.failures])
print("weights finite:", all(np.isfinite(w).all() for w in model.get_weights()))
print("epochs run:", len(history.history["loss"]))
print("optimizer iterations:", int(model.optimizer.iterations.numpy()))
