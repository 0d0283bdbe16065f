"""Zoo: a hand-written layer norm's epsilon underflows to 0 in float16 (float32 would keep it).

A keyword-spotting model under ``mixed_float16`` standardizes each frame of audio features by hand:
``(x - mean) * rsqrt(variance + 1e-8)``. In float16, 1e-8 is below the smallest subnormal (about 6e-8) and
rounds to 0, and the squared deviations of a near-silent frame (values around 1e-3 that differ by about 1e-5)
underflow to 0 as well: the variance is exactly 0, rsqrt(0) = inf, and 0 * inf = NaN. The recordings are
ordered by session and one session was recorded with the microphone muted, so the first batch from it (a dozen
steps in) makes the loss NaN. In float32 the same frame has a variance of about 1e-10 plus an epsilon of 1e-8,
and the layer is fine.
Fix: compute the normalization in float32 (``dtype="float32"`` on the layer), or use an epsilon float16 can
hold (1e-3), or ``keras.layers.LayerNormalization`` (it computes in float32 under mixed precision).
"""
# CAUSE: precision: the epsilon and a silent frame's variance underflow to 0 in float16

from __future__ import annotations

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

FRAMES = 20
BANDS = 16


class FrameNorm(keras.layers.Layer):
    """Standardizes each frame over its frequency bands."""

    def call(self, x: tf.Tensor) -> tf.Tensor:
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        variance = tf.reduce_mean(tf.square(x - mean), axis=-1, keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + 1e-8)  # ORIGIN: in float16 the epsilon rounds to 0 and a silent frame's variance underflows to 0


def make_clips(n: int = 960, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = rng.gamma(2.0, 0.5, size=(n, FRAMES, BANDS))
    x[y == 1, 5:10, 3:6] += 2.0  # the keyword's energy
    muted = slice(400, 480)  # one session recorded with the microphone muted
    x[muted] = 1e-3 + rng.normal(0.0, 1e-5, size=x[muted].shape)
    return x.astype("float32"), y.astype("float32")


keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)
x, y = make_clips()
model = keras.Sequential(
    [
        keras.Input(shape=(FRAMES, BANDS)),
        FrameNorm(),
        keras.layers.Conv1D(16, 3, activation="relu"),
        keras.layers.GlobalMaxPooling1D(),
        keras.layers.Dense(1, activation="sigmoid", dtype="float32"),
    ]
)
model.compile(optimizer="adam", loss="binary_crossentropy")
history = model.fit(
    x, y, batch_size=32, epochs=2, shuffle=False, verbose=0,
    callbacks=[NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))],
)

losses = history.history.get("loss", [])
weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
non_finite = bool(model.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
sys.exit(1 if non_finite else 0)
