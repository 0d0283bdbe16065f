"""Semi-supervised classifier (Pi-model: supervised CE on the few labelled rows + consistency between two noisy
passes on every row), custom loop under tf.distribute.MirroredStrategy on two logical CPUs. Unlabelled rows carry
label -1. Written by a helper trying NaN Lens as a user: one replica's 64-row shard with no labelled row makes the
supervised mean 0/0, while the global batch of 128 holds labelled rows."""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import guard_step

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
print("replicas:", strategy.num_replicas_in_sync)

N, IN_DIM, N_CLASSES = 6000, 20, 5
LABELLED_FRACTION = 0.05
GLOBAL_BATCH = 128
CONSISTENCY_W = 1.0

rng = np.random.default_rng(0)
centers = rng.normal(size=(N_CLASSES, IN_DIM)).astype("float32")
y_true = rng.integers(0, N_CLASSES, size=N)
x = (centers[y_true] + rng.normal(size=(N, IN_DIM))).astype("float32")
y = np.where(rng.random(N) < LABELLED_FRACTION, y_true, -1).astype("int32")
print("labelled rows:", int((y >= 0).sum()), "of", N)

ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(N, seed=0)
      .batch(GLOBAL_BATCH, drop_remainder=True).repeat())
dist_ds = strategy.experimental_distribute_dataset(ds)

with strategy.scope():
    model = keras.Sequential([
        keras.Input((IN_DIM,)),
        keras.layers.GaussianNoise(0.3),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dropout(0.2),
        keras.layers.Dense(N_CLASSES),
    ])
    optimizer = keras.optimizers.Adam(1e-3)
    ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def train_step(inputs):
    xb, yb = inputs
    labelled = tf.cast(yb >= 0, tf.float32)
    with tf.GradientTape() as tape:
        logits_a = model(xb, training=True)
        logits_b = model(xb, training=True)
        per_example = ce(tf.maximum(yb, 0), logits_a) * labelled
        # mean over this replica's labelled rows
        sup = tf.reduce_sum(per_example) / tf.reduce_sum(labelled)  # ORIGIN
        # CAUSE: 0/0: with 5% labelled rows, a replica's 64-row shard sometimes holds no labelled row at all;
        # reduce_sum(labelled) is 0 and the supervised mean is 0/0 = NaN (should be divide_no_nan or a
        # global-batch denominator).
        cons = tf.reduce_mean(tf.square(tf.nn.softmax(logits_a) - tf.nn.softmax(logits_b)))
        loss = (sup + CONSISTENCY_W * cons) / strategy.num_replicas_in_sync
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


@guard_step(capture_dir="captures", model=model, optimizer=optimizer)
@tf.function
def distributed_train_step(dist_inputs):
    per_replica_losses = strategy.run(train_step, args=(dist_inputs,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


it = iter(dist_ds)
for step in range(200):
    loss = distributed_train_step(next(it))
    if step % 10 == 0:
        print(f"step {step} loss {float(loss):.4f}")
