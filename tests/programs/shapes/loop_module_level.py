"""A custom training loop at module level (no main()), as in TensorFlow's "writing a training loop" guide.

The loss is balanced over classes: the mean loss of each class in the batch, averaged. A class missing from a
batch has a sum of 0 over a count of 0: 0 / 0 = NaN.
Fix: tf.math.divide_no_nan.
"""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NonFiniteStepError, guard_step

keras.utils.set_random_seed(7)
rng = np.random.default_rng(7)
x_train = rng.normal(size=(512, 10)).astype("float32")
y_train = rng.integers(0, 3, size=(512,)).astype("int32")
y_train[5 * 64 : 6 * 64] = rng.integers(0, 2, size=64)  # batch 5 has no sample of class 2

model = keras.Sequential([keras.Input(shape=(10,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(3)])
optimizer = keras.optimizers.SGD(learning_rate=1e-2)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(64)


@guard_step(model=model, optimizer=optimizer, capture_dir="captures")
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        per_sample = loss_fn(y, logits)
        counts = tf.math.bincount(y, minlength=3, dtype=tf.float32)
        per_class = tf.math.unsorted_segment_sum(per_sample, y, 3) / counts  # ORIGIN
        loss_value = tf.reduce_mean(per_class)
    grads = tape.gradient(loss_value, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))
    return loss_value


for epoch in range(2):
    for step, (x_batch_train, y_batch_train) in enumerate(train_dataset):
        try:
            loss_value = train_step(x_batch_train, y_batch_train)
        except NonFiniteStepError as e:
            print("stopped:", e)
            raise SystemExit(1)
    print(f"epoch {epoch}: loss {float(loss_value):.4f}")
