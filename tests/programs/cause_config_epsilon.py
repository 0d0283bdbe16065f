"""A config-driven text classifier as research repos write one: ``python cause_config_epsilon.py --config
configs/exp.json``, the optimizer built by a factory from the config (``getattr(keras.optimizers, name)(**cfg)``).
The config sets Adam's ``"epsilon": 0``: Adam divides by sqrt(v) + epsilon, 0 / 0 for every embedding row no batch
has used yet, at the first step. Used by tests/test_cause_programs.py (the test writes the config): the line to
change is the config file's epsilon, not a division inside Keras at the fit line.
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/exp.json")
    args = parser.parse_args()
    with open(args.config) as handle:
        cfg = json.load(handle)

    keras.utils.set_random_seed(cfg["seed"])
    rng = np.random.default_rng(cfg["seed"])
    x = rng.integers(0, cfg["vocab"] // 2, size=(512, 20))  # half the vocabulary never appears
    y = rng.integers(0, 3, size=512)
    model = keras.Sequential([
        keras.Input((20,), dtype="int32"),
        keras.layers.Embedding(cfg["vocab"], 16),
        keras.layers.GlobalAveragePooling1D(),
        keras.layers.Dense(3),
    ])
    model.compile(build_optimizer(cfg["optimizer"]), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=64, epochs=2, verbose=0, callbacks=[NanGuard("captures")])


if __name__ == "__main__":
    main()
