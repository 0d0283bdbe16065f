"""Predict transfer time from file size etc. with gradient accumulation (effective batch 4 x 32).

Custom loop in the tensorflow.org "training loop from scratch" style; gradients are accumulated in
tf.Variables and applied every ACCUM_STEPS micro-batches. The features are raw byte counts (1e9..6e10): at the
first update (micro-step 3) the accumulated gradients are finite but too large to square, and the guard refuses
the update. Its own check of them (an L2Loss inside the step's ``if micro_step % 4 == 0`` tf.cond) was named the
origin: "a L2Loss op overflowed ... keep its values in range".
"""
import numpy as np
import pandas as pd
import tensorflow as tf
from tensorflow import keras

from pyadapter import guard_step

ACCUM_STEPS = 4
MICRO_BATCH = 32
EPOCHS = 1
LR = 1e-3

# ---------------- data (a transfer log: bytes, number of hops, hour of day -> seconds)
tf.keras.utils.set_random_seed(3)
rng = np.random.default_rng(3)
n = 4096
df = pd.DataFrame({
    "bytes": rng.uniform(1e9, 6e10, n),
    "hops": rng.integers(1, 20, n).astype(float),
    "hour": rng.integers(0, 24, n).astype(float),
})
df["seconds"] = df["bytes"] / rng.uniform(5e6, 2e7, n) + 0.5 * df["hops"]

features = df[["bytes", "hops", "hour"]].values.astype("float32")  # raw bytes (1e9..6e10), unscaled
target = df["seconds"].values.astype("float32")[:, None]

train_ds = tf.data.Dataset.from_tensor_slices((features, target)).shuffle(n).batch(MICRO_BATCH, drop_remainder=True)

model = keras.Sequential([
    keras.Input(shape=(3,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(1),
])
optimizer = keras.optimizers.Adam(learning_rate=LR)
loss_fn = keras.losses.MeanSquaredError()

accum_grads = [tf.Variable(tf.zeros_like(v), trainable=False) for v in model.trainable_variables]
micro_step = tf.Variable(0, dtype=tf.int64, trainable=False)


@guard_step(capture_dir="captures", model=model, optimizer=optimizer)
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
        loss = loss_fn(y, pred)
    grads = tape.gradient(loss, model.trainable_variables)
    for acc, g in zip(accum_grads, grads):
        acc.assign_add(g)  # summed; divided by ACCUM_STEPS when applied
    micro_step.assign_add(1)
    if micro_step % ACCUM_STEPS == 0:
        optimizer.apply_gradients(
            zip([acc / ACCUM_STEPS for acc in accum_grads], model.trainable_variables))
        for acc in accum_grads:
            acc.assign(tf.zeros_like(acc))
    return loss


for epoch in range(EPOCHS):
    losses = []
    for step, (x_batch, y_batch) in enumerate(train_ds):
        loss = train_step(x_batch, y_batch)
        losses.append(float(loss))
        if step % 32 == 0:
            print(f"epoch {epoch} step {step}: loss {float(loss):.4g}")
    print(f"epoch {epoch}: mean loss {np.mean(losses):.4g}")
