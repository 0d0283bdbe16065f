# Partially-labelled classification with gradient accumulation (effective batch 4 x 16 = 64), because the
# real model only fits 16 examples per step on the GPU. Unlabelled rows have label -1 and are masked out
# of the loss; the accumulated gradient is averaged over the labelled examples it saw.
import numpy as np
import tensorflow as tf

from pyadapter import guard_step

np.random.seed(3)
tf.random.set_seed(3)

ACCUM_STEPS = 4
MICRO_BATCH = 16
N, D, C = 8000, 20, 5

# ---- data: rows come in ingestion order; annotators labelled ~40% of them, and skipped one whole
# ingestion batch (rows 3000-3399) entirely.
centers = np.random.randn(C, D) * 2
y_all = np.random.randint(0, C, N)
x_all = (centers[y_all] + np.random.randn(N, D)).astype("float32")
labels = np.where(np.random.rand(N) < 0.4, y_all, -1)
labels[3000:3400] = -1
labels = labels.astype("int32")

dataset = tf.data.Dataset.from_tensor_slices((x_all, labels)).batch(MICRO_BATCH)

model = tf.keras.Sequential([
    tf.keras.layers.Input((D,)),
    tf.keras.layers.Dense(64, activation="relu"),
    tf.keras.layers.Dense(64, activation="relu"),
    tf.keras.layers.Dense(C),
])
optimizer = tf.keras.optimizers.Adam(1e-3)
model.build((None, D))

accum_grads = [tf.Variable(tf.zeros_like(v), trainable=False) for v in model.trainable_variables]
accum_count = tf.Variable(0.0, trainable=False)       # labelled examples seen since the last update
micro_step = tf.Variable(0, dtype=tf.int64, trainable=False)


@guard_step(capture_dir="captures", model=model, optimizer=optimizer)
@tf.function
def train_step(x, y):
    valid = tf.cast(y >= 0, tf.float32)
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        per_example = tf.keras.losses.sparse_categorical_crossentropy(tf.maximum(y, 0), logits, from_logits=True)
        loss_sum = tf.reduce_sum(per_example * valid)
    grads = tape.gradient(loss_sum, model.trainable_variables)
    for acc, g in zip(accum_grads, grads):
        acc.assign_add(g)
    accum_count.assign_add(tf.reduce_sum(valid))
    micro_step.assign_add(1)
    if micro_step % ACCUM_STEPS == 0:
        # CAUSE: when none of the 4 micro-batches had a labelled example (rows 3000-3399), accum_count is 0
        # and every accumulated gradient is 0 too: 0 / 0 = NaN gradients go to the optimizer.
        mean_grads = [acc / accum_count for acc in accum_grads]   # ORIGIN
        optimizer.apply_gradients(zip(mean_grads, model.trainable_variables))
        for acc in accum_grads:
            acc.assign(tf.zeros_like(acc))
        accum_count.assign(0.0)
    return loss_sum / tf.maximum(tf.reduce_sum(valid), 1.0)


for epoch in range(3):
    total, n = 0.0, 0
    for x, y in dataset:
        loss = train_step(x, y)
        total += float(loss)
        n += 1
    print(f"epoch {epoch}: mean labelled loss {total / n:.4f}")
