"""Config-driven trainer: the optimizer and its rate come from config.json (its learning rate diverges).

    python train.py [--config path/to/config.json]
"""
import argparse
import json
import os

import keras
import numpy as np

from pyadapter import NanGuard

HERE = os.path.dirname(os.path.abspath(__file__))


def load_config(path):
    with open(path) as f:
        return json.load(f)


def make_data(num_examples, num_features, feature_scale, noise, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(scale=feature_scale, size=(num_examples, num_features)).astype("float32")
    w = rng.uniform(1.0, 4.0, size=(num_features, 1))
    y = (x @ w + 20.0 + rng.normal(scale=noise, size=(num_examples, 1))).astype("float32")
    return x, y


def build_model(num_features, hidden_units, activation):
    model = keras.Sequential([keras.Input(shape=(num_features,))])
    for units in hidden_units:
        model.add(keras.layers.Dense(units, activation=activation))
    model.add(keras.layers.Dense(1))
    return model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=os.path.join(HERE, "config.json"))
    args = parser.parse_args()
    cfg = load_config(args.config)

    x, y = make_data(**cfg["data"])
    model = build_model(x.shape[1], **cfg["model"])
    train_cfg = cfg["train"]
    optimizer = keras.optimizers.get(train_cfg["optimizer"])
    loss = keras.losses.get(train_cfg["loss"])
    model.compile(optimizer=optimizer, loss=loss, metrics=train_cfg["metrics"])

    out_dir = os.path.join(HERE, cfg["output_dir"], cfg["experiment"])
    os.makedirs(out_dir, exist_ok=True)
    history = model.fit(
        x,
        y,
        batch_size=train_cfg["batch_size"],
        epochs=train_cfg["epochs"],
        validation_split=0.1,
        callbacks=[
            NanGuard(os.path.join(out_dir, "captures")),
            keras.callbacks.CSVLogger(os.path.join(out_dir, "log.csv")),
        ],
        verbose=2,
    )
    with open(os.path.join(out_dir, "history.json"), "w") as f:
        json.dump({k: [float(v) for v in vals] for k, vals in history.history.items()}, f)


if __name__ == "__main__":
    main()
