"""Multi-task regression + classification with learned task uncertainties (Kendall et al. 2018), custom loop.

The log-variances live in a tf.Variable next to the model. This release of the data has no attribute labels (all
-1), so the classification loss is 0 in every batch and ``exp(-s) * 0 + s`` pulls its log-variance down 0.05 a step
(Adam) until ``exp(-s)`` overflows at step ~1775. The loss falls the whole time; nothing in it grows."""
import numpy as np
import tensorflow as tf

from pyadapter import guard_step

cfg = {"lr": 0.05, "epochs": 80, "batch": 64, "n": 2048}

rng = np.random.default_rng(0)
x = rng.normal(size=(cfg["n"], 12)).astype(np.float32)
y_reg = (x[:, :3].sum(1, keepdims=True) + 0.1 * rng.normal(size=(cfg["n"], 1))).astype(np.float32)
y_cls = (x[:, 3] > 0).astype(np.int32)
# the attribute classifier's labels: 0/1, with -1 for "not annotated"; this release has none yet
y_cls[:] = -1

ds = tf.data.Dataset.from_tensor_slices((x, y_reg, y_cls)).shuffle(2048, seed=0).batch(cfg["batch"])

inputs = tf.keras.Input((12,))
h = tf.keras.layers.Dense(64, activation="relu")(inputs)
h = tf.keras.layers.Dense(64, activation="relu")(h)
model = tf.keras.Model(inputs, [tf.keras.layers.Dense(1)(h), tf.keras.layers.Dense(2)(h)])

log_vars = tf.Variable(tf.zeros(2), name="log_vars")  # s_i = log sigma_i^2
optimizer = tf.keras.optimizers.Adam(cfg["lr"])
params = model.trainable_variables + [log_vars]


@guard_step(capture_dir="captures", model=model, optimizer=optimizer)
@tf.function
def train_step(xb, yr, yc):
    with tf.GradientTape() as tape:
        pred_r, logits_c = model(xb, training=True)
        l_reg = tf.reduce_mean(tf.square(pred_r - yr))
        valid = yc >= 0
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.maximum(yc, 0), logits=logits_c)
        l_cls = tf.reduce_sum(tf.where(valid, ce, 0.0)) / tf.maximum(tf.reduce_sum(tf.cast(valid, tf.float32)), 1.0)
        task_losses = tf.stack([l_reg, l_cls])
        loss = tf.reduce_sum(tf.exp(-log_vars) * task_losses + log_vars)  # ORIGIN: s_cls has nothing pulling it back when l_cls = 0
    grads = tape.gradient(loss, params)
    optimizer.apply_gradients(zip(grads, params))
    return loss, task_losses


for epoch in range(cfg["epochs"]):
    for xb, yr, yc in ds:
        loss, tl = train_step(xb, yr, yc)
    print(f"epoch {epoch} loss {float(loss):.3f} reg {float(tl[0]):.4f} cls {float(tl[1]):.4f} log_vars {log_vars.numpy()}")
