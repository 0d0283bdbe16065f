"""tensorflow.org's "Basic training loops", as written there: a tf.Module with two tf.Variables, a `train` function
that takes the model and the learning rate and writes the update itself (no optimizer), run eagerly at module
level. Only the learning rate is changed: 1.2 is too large for this data, and the loss grows until it overflows.
Fix: a smaller learning rate (0.1 in the tutorial).
"""

import tensorflow as tf

from pyadapter import guard_step

TRUE_W = 3.0
TRUE_B = 2.0
NUM_EXAMPLES = 201

x = tf.linspace(-2, 2, NUM_EXAMPLES)
x = tf.cast(x, tf.float32)


def f(x):
    return x * TRUE_W + TRUE_B


noise = tf.random.normal(shape=[NUM_EXAMPLES], seed=3)
y = f(x) + noise


class MyModel(tf.Module):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.w = tf.Variable(5.0)
        self.b = tf.Variable(0.0)

    def __call__(self, x):
        return self.w * x + self.b


model = MyModel()


def loss(target_y, predicted_y):
    return tf.reduce_mean(tf.square(target_y - predicted_y))  # ORIGIN


def train(model, x, y, learning_rate):
    with tf.GradientTape() as t:
        current_loss = loss(y, model(x))
    dw, db = t.gradient(current_loss, [model.w, model.b])
    model.w.assign_sub(learning_rate * dw)
    model.b.assign_sub(learning_rate * db)


train = guard_step(train, checkpoint=tf.train.Checkpoint(model=model), capture_dir="captures")
epochs = range(200)


def training_loop(model, x, y):
    for epoch in epochs:
        train(model, x, y, learning_rate=1.2)  # CHANGE
        current_loss = loss(y, model(x))
        print(f"Epoch {epoch:2d}: W = {model.w.numpy():1.2f}, b = {model.b.numpy():1.2f}, loss={current_loss:2.5f}")


training_loop(model, x, y)
