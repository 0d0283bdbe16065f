"""A basic training loop with Adam written by hand (no Keras optimizer) on a tf.Module, as a tester wrote it (s41e
p2): the slots and the step counter t are module globals the step assigns, and t is counted after the bias
correction reads it, so the first step divides by 1 - beta1 ** 0 = 0. The bundle held t = 3 (the step's own write
and two re-runs'), and every re-run stayed finite: "no origin"."""

import numpy as np
import tensorflow as tf

from pyadapter import guard_step

tf.random.set_seed(1)
np.random.seed(1)

# regression data
X = np.random.randn(1024, 8).astype(np.float32)
true_w = np.random.randn(8, 1).astype(np.float32)
Y = (X @ true_w + 0.1 * np.random.randn(1024, 1)).astype(np.float32)
dataset = tf.data.Dataset.from_tensor_slices((X, Y)).shuffle(1024, seed=1).batch(32)


class MLP(tf.Module):
    def __init__(self):
        super().__init__()
        self.w1 = tf.Variable(tf.random.normal([8, 32], stddev=0.3), name="w1")
        self.b1 = tf.Variable(tf.zeros([32]), name="b1")
        self.w2 = tf.Variable(tf.random.normal([32, 1], stddev=0.3), name="w2")
        self.b2 = tf.Variable(tf.zeros([1]), name="b2")

    def __call__(self, x):
        h = tf.nn.relu(x @ self.w1 + self.b1)
        return h @ self.w2 + self.b2


model = MLP()
lr, beta1, beta2, eps = 1e-2, 0.9, 0.999, 1e-8
m_slots = [tf.Variable(tf.zeros_like(v)) for v in model.trainable_variables]
v_slots = [tf.Variable(tf.zeros_like(v)) for v in model.trainable_variables]
t = tf.Variable(0.0)


@tf.function
def train(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    for var, g, m, v in zip(model.trainable_variables, grads, m_slots, v_slots):
        m.assign(beta1 * m + (1 - beta1) * g)
        v.assign(beta2 * v + (1 - beta2) * g * g)
        m_hat = m / (1 - beta1**t)  # CHANGE: t is 0 at the first step
        v_hat = v / (1 - beta2**t)
        var.assign_sub(lr * m_hat / (tf.sqrt(v_hat) + eps))
    t.assign_add(1.0)
    return loss


train = guard_step(train, checkpoint=tf.train.Checkpoint(model=model), capture_dir="captures")

for epoch in range(5):
    for step, (x, y) in enumerate(dataset):
        loss = train(x, y)
    print(f"epoch {epoch}: loss {float(loss):.4f}")
