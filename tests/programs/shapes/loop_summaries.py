"""A custom loop that logs to TensorBoard from inside its tf.function step (tensorflow.org's "Custom training:
walkthrough" with tf.summary) and keeps Keras metrics, its inputs standardized per batch by hand: a binary flag
that is constant within a batch has std 0, and 0/0 makes the step's gradients NaN. Checkpoints are written with a
CheckpointManager each epoch."""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import guard_step

np.random.seed(11)
tf.random.set_seed(11)

n = 4000
x_cont = np.random.normal(loc=50.0, scale=10.0, size=(n, 8))
flag = (np.random.rand(n, 1) < 0.2).astype("float64")
x_all = np.concatenate([x_cont, flag], axis=1).astype("float32")
y_all = ((x_cont[:, 0] - 50.0) / 10.0 + 2.0 * flag[:, 0] > 0.5).astype("float32")[:, None]
dataset = tf.data.Dataset.from_tensor_slices((x_all, y_all)).shuffle(n, seed=11).batch(16)

model = keras.Sequential([keras.Input(shape=(9,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
optimizer = keras.optimizers.Adam(learning_rate=1e-3)
loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
train_loss = keras.metrics.Mean(name="train_loss")
manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=optimizer), "ckpts", max_to_keep=2)

writer = tf.summary.create_file_writer("logs/train")
writer.set_as_default()


@tf.function
def train_step(x, y):
    x = (x - tf.reduce_mean(x, axis=0)) / tf.math.reduce_std(x, axis=0)  # ORIGIN
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = loss_fn(y, logits)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    train_loss.update_state(loss)
    tf.summary.scalar("loss", loss, step=optimizer.iterations)
    return loss


train_step = guard_step(train_step, capture_dir="captures", model=model, optimizer=optimizer)

for epoch in range(3):
    train_loss.reset_state()
    for x, y in dataset:
        train_step(x, y)
    manager.save()
    writer.flush()
    print(f"epoch {epoch}: loss {train_loss.result():.4f}")
