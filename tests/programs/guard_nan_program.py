"""A Keras training program with a real NaN bug, guarded by NanGuard (used by tests/test_guard_program.py).

The bug: a hand-written binary cross-entropy takes log() of a sigmoid output. One batch of the data has a few
inputs a thousand times larger than the rest (an unnormalized outlier), the logits saturate, sigmoid returns exactly
0.0 or 1.0 in float32, and log(0) = -inf turns the loss into NaN.

Usage: python guard_nan_program.py CAPTURE_DIR OUT_NPZ
Writes the model's weights after fit to OUT_NPZ so the test can check they are finite and match the bundle.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from pyadapter import NanGuard  # noqa: E402

BAD_BATCH = 5
BATCH = 16


def naive_bce(y_true, y_pred):
    p = tf.sigmoid(y_pred)
    return -tf.reduce_mean(y_true * tf.math.log(p) + (1.0 - y_true) * tf.math.log(1.0 - p))  # ORIGIN


def make_data():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(BATCH * 8, 6)).astype("float32")
    y = (x[:, :1] > 0).astype("float32")
    x[BAD_BATCH * BATCH : BAD_BATCH * BATCH + 3] *= 1e4  # the outlier rows
    return x, y


def main() -> int:
    capture_dir, out = sys.argv[1], sys.argv[2]
    keras.utils.set_random_seed(3)
    x, y = make_data()
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=naive_bce)
    guard = NanGuard(capture_dir)
    model.fit(x, y, batch_size=BATCH, epochs=3, shuffle=False, verbose=0, callbacks=[guard])
    np.savez(out, *model.get_weights(), iterations=int(model.optimizer.iterations.numpy()))
    print("bundle:", guard.last_bundle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
