"""A classifier trained with a softmax temperature the loop anneals before each step, as the char-RNN and
distillation tutorials write it: ``temperature = tf.Variable(...)`` at module level, assigned from a schedule in
the loop, read by the loss inside the guarded tf.function. The schedule reaches 0 at step 30 (no floor) and the
logits divided by it become +/-inf, the cross-entropy NaN.

The step only reads the temperature: no model or optimizer holds it, so a replay that ran the program's own
value (2.0) stayed finite ("cause: unknown").
"""

import numpy as np
import tensorflow as tf

from pyadapter import guard_step

tf.keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 12)).astype("float32")
y = (x[:, 0] + x[:, 1] > 0).astype("int64") + (x[:, 2] > 1).astype("int64")

dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024, seed=1).batch(32, drop_remainder=True).repeat()

model = tf.keras.Sequential([
    tf.keras.Input((12,)),
    tf.keras.layers.Dense(32, activation="relu"),
    tf.keras.layers.Dense(3),
])
optimizer = tf.keras.optimizers.Adam(1e-3)

T_START = 2.0
ANNEAL_STEPS = 30
temperature = tf.Variable(T_START, trainable=False, name="temperature")


def temperature_schedule(step):
    return T_START * (1.0 - step / ANNEAL_STEPS)  # no floor: 0 at step 30


def loss_fn(labels, logits):
    scaled = logits / temperature  # ORIGIN
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=scaled))


@guard_step(capture_dir="captures", model=model, optimizer=optimizer)
@tf.function
def train_step(inputs, labels):
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(inputs, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for step, (inputs, labels) in enumerate(dataset.take(60)):
    temperature.assign(temperature_schedule(step))
    loss = train_step(inputs, labels)
    if step % 10 == 0:
        print(f"step {step}: loss {float(loss):.4f} T {temperature.numpy():.3f}")
