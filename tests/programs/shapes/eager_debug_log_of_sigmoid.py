"""A fraud-detection toy whose author turned ``tf.config.run_functions_eagerly(True)`` on to step through the step with
print()/pdb, as tutorials suggest: a guarded ``@tf.function`` step with a hand-written binary crossentropy, log of a
sigmoid, on transaction amounts in raw dollars. The guard's dump is then of eager executions, not of a graph."""
import tensorflow as tf

tf.config.run_functions_eagerly(True)  # debugging: step through train_step with print()/pdb

import numpy as np  # noqa: E402

from pyadapter import guard_step  # noqa: E402

rng = np.random.default_rng(1)
N = 4096
amount = rng.lognormal(4.0, 1.2, N)
hour = rng.integers(0, 24, N)
risk = rng.uniform(0, 1, N)
x_train = np.stack([amount, hour, risk], axis=1).astype("float32")
p = 1 / (1 + np.exp(-(0.004 * amount + 3 * risk - 4)))
y_train = (rng.uniform(size=N) < p).astype("float32")[:, None]
train_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(N, seed=0).batch(128)

model = tf.keras.Sequential([
    tf.keras.layers.Input(shape=(3,)),
    tf.keras.layers.Dense(32, activation="relu"),
    tf.keras.layers.Dense(1),
])
optimizer = tf.keras.optimizers.Adam(learning_rate=1e-2)


def bce(y, logits):
    p = tf.sigmoid(logits)
    return -tf.reduce_mean(y * tf.math.log(p) + (1 - y) * tf.math.log(1 - p))  # ORIGIN


@guard_step(capture_dir="captures", model=model, optimizer=optimizer)
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = bce(y, logits)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for epoch in range(5):
    total, steps = 0.0, 0
    for x, y in train_ds:
        loss = train_step(x, y)
        total += float(loss)
        steps += 1
    print(f"epoch {epoch}: loss {total / steps:.4f}")
