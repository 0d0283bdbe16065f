"""Gradient accumulation on a small regression model (simulate a large batch on a small device).

Accumulate the gradients of ACCUM_STEPS micro-batches into tf.Variables, apply them every ACCUM_STEPS-th
micro-step. Data comes from a "sensor log" where one reading was recorded as NaN (a dropped reading).
"""
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

# one accumulator per trainable variable
accum_grads = [tf.Variable(tf.zeros_like(v), trainable=False) for v in model.trainable_variables]


@guard_step(capture_dir="captures", model=model, optimizer=optimizer)
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
        loss = loss_fn(y, pred)
    grads = tape.gradient(loss, model.trainable_variables)
    for acc, g in zip(accum_grads, grads):
        acc.assign_add(g / ACCUM_STEPS)
    return loss


@tf.function
def apply_accumulated():
    optimizer.apply_gradients(zip(accum_grads, model.trainable_variables))
    for acc in accum_grads:
        acc.assign(tf.zeros_like(acc))


for epoch in range(3):
    for step, (x, y) in enumerate(dataset):
        loss = train_step(x, y)
        if (step + 1) % ACCUM_STEPS == 0:
            apply_accumulated()
        if step % 16 == 0:
            print(f"epoch {epoch} step {step} loss {float(loss):.4f}")

print("done")
