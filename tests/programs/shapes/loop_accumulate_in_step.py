"""Gradient accumulation in one tf.function (research-repo style): accumulate every micro-step,
apply and reset inside the same step every ACCUM_STEPS-th call."""
import keras
import numpy as np
import tensorflow as tf

from pyadapter import guard_step

ACCUM_STEPS = 4
MICRO_BATCH = 8

rng = np.random.default_rng(0)
x_train = rng.normal(size=(512, 6)).astype("float32")
y_train = (x_train @ rng.normal(size=(6, 1)) + 0.1 * rng.normal(size=(512, 1))).astype("float32")
x_train[209, 3] = np.nan  # a dropped sensor reading nobody filtered

dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(MICRO_BATCH)  # CHANGE: filter the NaN reading

model = keras.Sequential([
    keras.Input(shape=(6,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(1),
])
optimizer = keras.optimizers.Adam(1e-3)
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
        acc.assign_add(g / ACCUM_STEPS)
    micro_step.assign_add(1)
    if micro_step % ACCUM_STEPS == 0:
        optimizer.apply_gradients(zip(accum_grads, model.trainable_variables))
        for acc in accum_grads:
            acc.assign(tf.zeros_like(acc))
    return loss


for epoch in range(3):
    for step, (x, y) in enumerate(dataset):
        loss = train_step(x, y)
        if step % 16 == 0:
            print(f"epoch {epoch} step {step} loss {float(loss):.4f}")

print("done; weights finite:", all(bool(tf.reduce_all(tf.math.is_finite(v))) for v in model.trainable_variables))
