"""A config-driven trainer as research repos write one: ``python cause_config_factory.py --config configs/exp.json``,
the optimizer built by a factory from the config (``getattr(keras.optimizers, name)(**cfg)``), the task a text
classifier (``"task": "text"``) or a regression. Used by tests/test_cause_programs.py, which writes the config:
Adam's ``"epsilon": 0`` (0 / 0 in the update for every embedding row no batch has used, at the first step), or an
SGD rate typo (50.0 for 0.5). The config file's line is the one to change: no line of the program names the
optimizer.
"""

import argparse
import json

import keras
import numpy as np

from pyadapter import NanGuard


def build_optimizer(cfg):
    cfg = dict(cfg)
    cls = getattr(keras.optimizers, cfg.pop("name"))
    return cls(**cfg)


def text_classifier(cfg, rng):
    x = rng.integers(0, cfg["vocab"] // 2, size=(512, 20))  # half the vocabulary never appears
    y = rng.integers(0, 3, size=512)
    model = keras.Sequential([
        keras.Input((20,), dtype="int32"),
        keras.layers.Embedding(cfg["vocab"], 16),
        keras.layers.GlobalAveragePooling1D(),
        keras.layers.Dense(3),
    ])
    return model, keras.losses.SparseCategoricalCrossentropy(from_logits=True), x, y


def regression(cfg, rng):
    x = rng.normal(size=(512, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1))).astype("float32")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    return model, "mse", x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/exp.json")
    args = parser.parse_args()
    with open(args.config) as handle:
        cfg = json.load(handle)

    keras.utils.set_random_seed(cfg["seed"])
    rng = np.random.default_rng(cfg["seed"])
    model, loss, x, y = (text_classifier if cfg["task"] == "text" else regression)(cfg, rng)
    model.compile(build_optimizer(cfg["optimizer"]), loss)
    model.fit(x, y, batch_size=32, epochs=3, verbose=0, callbacks=[NanGuard("captures")])


if __name__ == "__main__":
    main()
