"""A text classifier on a large frozen (pretrained) embedding table, trained at module level the way an example
script does: 1M x 16 embedding weights that never train, a small trainable head, and one label in the data set
that is NaN (a bad row). NanGuard's window must not copy the frozen table (64 MB, twice) every few steps, and its
bundle must still give the table's value at the window's start. Used by tests/test_guard_window.py.

Usage: frozen_embedding_bad_label.py CAPTURE_DIR
"""

import sys

import keras
import numpy as np

from pyadapter import NanGuard

VOCABULARY, DIMENSION, TOKENS = 1_000_000, 16, 8
keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
tokens = rng.integers(0, VOCABULARY, size=(32 * 200, TOKENS))
labels = rng.integers(0, 2, size=(32 * 200, 1)).astype("float32")
labels[32 * 150 + 5] = np.nan  # a bad row: step 150's batch

pretrained = rng.normal(size=(VOCABULARY, DIMENSION)).astype("float32")
model = keras.Sequential([
    keras.Input((TOKENS,), dtype="int32"),
    keras.layers.Embedding(VOCABULARY, DIMENSION, weights=[pretrained], trainable=False),
    keras.layers.GlobalAveragePooling1D(),
    keras.layers.Dense(16, activation="relu"),
    keras.layers.Dense(1),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse", jit_compile=False)
guard = NanGuard(sys.argv[1])
model.fit(tokens, labels, batch_size=32, epochs=1, shuffle=False, verbose=0, callbacks=[guard])
print(f"NanGuard copied the state every {guard.window_copy_every} steps")
