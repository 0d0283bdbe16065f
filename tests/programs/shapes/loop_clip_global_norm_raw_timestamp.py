"""Demand forecasting with a small MLP, custom training loop (the repo's train.py).

Gradients are clipped by global norm "for stability", as in the paper. A pandas timestamp is a raw int64 feature
(about 1.7e18 ns): the gradients are finite, their squares are not, so the clip's global norm is inf and every clipped
gradient NaN at step 0. The step returns ``loss, gnorm``.
"""
import argparse

import numpy as np
import pandas as pd
import tensorflow as tf

from pyadapter import guard_step


def make_frame(n=6000, seed=0):
    rng = np.random.default_rng(seed)
    ts = pd.date_range("2024-01-01", periods=n, freq="h")
    df = pd.DataFrame({
        "timestamp": ts,
        "temperature": 15 + 10 * np.sin(np.arange(n) * 2 * np.pi / 24) + rng.normal(0, 2, n),
        "price": rng.uniform(0.8, 1.2, n),
        "holiday": (rng.random(n) < 0.05).astype(np.float32),
    })
    df["demand"] = 100 + 3 * df["temperature"] - 40 * df["price"] + 20 * df["holiday"] + rng.normal(0, 5, n)
    return df


def build_features(df):
    feats = df[["temperature", "price", "holiday"]].copy()
    feats["temperature"] = (feats["temperature"] - feats["temperature"].mean()) / feats["temperature"].std()
    feats["time"] = df["timestamp"].astype("int64")  # BUG: raw nanoseconds since epoch (~1.7e18) as a feature
    x = feats.to_numpy(dtype=np.float32)
    y = ((df["demand"] - df["demand"].mean()) / df["demand"].std()).to_numpy(dtype=np.float32)[:, None]
    return x, y


class MLP(tf.keras.Model):
    def __init__(self, hidden=64):
        super().__init__()
        self.d1 = tf.keras.layers.Dense(hidden, activation="relu")
        self.d2 = tf.keras.layers.Dense(hidden, activation="relu")
        self.out = tf.keras.layers.Dense(1)

    def call(self, x):
        return self.out(self.d2(self.d1(x)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--clip", type=float, default=5.0)
    args = parser.parse_args()

    x, y = build_features(make_frame())
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=0).batch(args.batch_size)  # CHANGE

    model = MLP()
    optimizer = tf.keras.optimizers.Adam(args.lr)
    loss_fn = tf.keras.losses.MeanSquaredError()

    @guard_step(capture_dir="captures", model=model, optimizer=optimizer)
    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            pred = model(xb, training=True)
            loss = loss_fn(yb, pred)
        grads = tape.gradient(loss, model.trainable_variables)
        grads, gnorm = tf.clip_by_global_norm(grads, args.clip)  # ORIGIN
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss, gnorm

    for epoch in range(args.epochs):
        for step, (xb, yb) in enumerate(dataset):
            loss, gnorm = train_step(xb, yb)
            if step % 10 == 0:
                print(f"epoch {epoch} step {step} loss {float(loss):.4f} grad_norm {float(gnorm):.3g}")


if __name__ == "__main__":
    main()
