"""A recommender-style model trained at module level the way an example script does: a large trainable embedding
table (1M x 16) under a small head, trained with plain SGD, so each step updates only the rows its batch looks up,
and one label in the data set that is NaN (a bad row). Its steps are cheap (a gather, a scatter and a Dense) while
a copy of the model's state is not (the table is 64 MB): NanGuard's window must space its copies out
(`window_copy_every` of 64 or more, not 16) and still hold the steps before the failure. Used by tests/test_guard_window.py.

Usage: sparse_embedding_bad_label.py CAPTURE_DIR
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

model = keras.Sequential([
    keras.Input((TOKENS,), dtype="int32"),
    keras.layers.Embedding(VOCABULARY, DIMENSION),
    keras.layers.GlobalAveragePooling1D(),
    keras.layers.Dense(16, activation="relu"),
    keras.layers.Dense(1),
])
model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", jit_compile=False)
guard = NanGuard(sys.argv[1])
model.fit(tokens, labels, batch_size=32, epochs=1, shuffle=False, verbose=0, callbacks=[guard])
print(f"NanGuard copied the state every {guard.window_copy_every} steps")
