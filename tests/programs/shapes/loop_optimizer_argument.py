"""A research repo's training loop: the step takes the model, the optimizer and the loss as arguments
(``train_step(x, y, model, optimizer, criterion)``), as TF2 ports of PyTorch code write it. Written by a helper as its
users write it."""

import argparse

import numpy as np
import tensorflow as tf

from pyadapter import guard_step


def build_model(dim):
    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(dim,)),
            tf.keras.layers.Dense(32, activation="relu"),
            tf.keras.layers.Dense(16),
        ]
    )


def cosine_loss(a, b):
    a = a / tf.norm(a, axis=1, keepdims=True)  # ORIGIN: a zero embedding has norm 0
    b = tf.math.l2_normalize(b, axis=1)
    return -tf.reduce_mean(tf.reduce_sum(a * b, axis=1))


rng = np.random.default_rng(0)
views = rng.normal(size=(512, 8)).astype("float32")
views[10] = 0.0  # a blank view
model = build_model(8)
optimizer = tf.keras.optimizers.SGD(0.05, momentum=0.9)


@guard_step(capture_dir="captures", model=model, optimizer=optimizer)
@tf.function
def train_step(x, y, model, optimizer, criterion):
    with tf.GradientTape() as tape:
        loss = criterion(model(x, training=True), model(y, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    for epoch in range(args.epochs):
        for start in range(0, len(views), 64):
            x = tf.constant(views[start : start + 64])
            loss = train_step(x, x + 0.1 * rng.normal(size=x.shape).astype("float32"), model, optimizer, cosine_loss)
        print(f"epoch {epoch}: loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
