"""A character-level language model with a stateful GRU, as Keras's old text-generation examples write it: the text
cut into 32 parallel streams, ``Input(batch_shape=...)``, ``GRU(stateful=True)``, ``fit(shuffle=False)`` so each batch
continues the state the last one left. Written by a helper as its users write it.

The bug: a ReLU recurrence (``activation="relu"``) whose state, carried across batches, grows without bound."""

import keras
import numpy as np
from keras import layers

from pyadapter import NanGuard

keras.utils.set_random_seed(2)
rng = np.random.default_rng(7)
subjects = ["the cat", "a dog", "the old man", "my sister", "the king", "a little bird", "the baker"]
verbs = ["sat on", "ran to", "looked at", "sang to", "jumped over", "baked for", "danced with"]
objects = ["the mat", "the hill", "a red ball", "the moon", "the queen", "a big cake", "the river"]
text = " ".join(f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)}." for _ in range(6000))
vocab = sorted(set(text))
char2idx = {c: i for i, c in enumerate(vocab)}
text_as_int = np.array([char2idx[c] for c in text], dtype=np.int32)

BATCH_SIZE = 32
SEQ_LEN = 100
n_streams = len(text_as_int) // BATCH_SIZE
streams = text_as_int[: n_streams * BATCH_SIZE].reshape(BATCH_SIZE, n_streams)
n_batches = (n_streams - 1) // SEQ_LEN
X = np.concatenate([streams[:, i * SEQ_LEN : (i + 1) * SEQ_LEN] for i in range(n_batches)])
Y = np.concatenate([streams[:, i * SEQ_LEN + 1 : (i + 1) * SEQ_LEN + 1] for i in range(n_batches)])

model = keras.Sequential(
    [
        keras.Input(batch_shape=(BATCH_SIZE, None), dtype="int32"),
        layers.Embedding(len(vocab), 32),
        layers.GRU(256, return_sequences=True, stateful=True, activation="relu"),  # the state grows without bound
        layers.Dense(len(vocab)),
    ]
)
model.compile(
    optimizer=keras.optimizers.Adam(learning_rate=0.005),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
)
history = model.fit(X, Y, batch_size=BATCH_SIZE, epochs=2, shuffle=False, callbacks=[NanGuard("captures")])
print("weights finite:", all(np.isfinite(w).all() for w in model.get_weights()))
state = model.layers[1].states[0].numpy()
print("state finite:", bool(np.isfinite(state).all()))
