"""The custom training loop of TensorFlow's "Custom training with tf.distribute.Strategy" tutorial, on two logical
CPUs, at module level.

The model predicts a rate and the loss is the Poisson deviance written by hand: 2 (y log(y / rate) - (y - rate)).
A count of 0 makes y log(y / rate) = 0 * log(0) = 0 * -inf = NaN (its limit is 0).
Fix: tf.math.xlogy(y, y / rate), or tf.where(y > 0, ..., 0.0).
"""

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NonFiniteStepError, guard_step

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])

keras.utils.set_random_seed(11)
rng = np.random.default_rng(11)
features = rng.normal(size=(512, 6)).astype("float32")
counts = rng.poisson(6.0, size=(512, 1)).astype("float32")

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
print("Number of devices:", strategy.num_replicas_in_sync)

BATCH_SIZE_PER_REPLICA = 16
GLOBAL_BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync
train_dataset = tf.data.Dataset.from_tensor_slices((features, counts)).batch(GLOBAL_BATCH_SIZE)
train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)

with strategy.scope():
    model = keras.Sequential(
        [keras.Input(shape=(6,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1, activation="exponential")]
    )
    optimizer = keras.optimizers.Adam(learning_rate=1e-3)
    optimizer.build(model.trainable_variables)  # Keras 3 cannot build it lazily inside strategy.run

    def compute_loss(labels, rate):
        per_example_loss = 2.0 * (labels * tf.math.log(labels / rate) - (labels - rate))  # ORIGIN
        return tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)


def train_step(inputs):
    images, labels = inputs
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = compute_loss(labels, predictions)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss


@guard_step(model=model, optimizer=optimizer, capture_dir="captures")
@tf.function
def distributed_train_step(dataset_inputs):
    per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


for epoch in range(2):
    total_loss = 0.0
    num_batches = 0
    try:
        for x in train_dist_dataset:
            total_loss += distributed_train_step(x)
            num_batches += 1
    except NonFiniteStepError as e:
        print("stopped:", e)
        break
    print(f"Epoch {epoch + 1}, Loss: {float(total_loss / num_batches):.4f}")
