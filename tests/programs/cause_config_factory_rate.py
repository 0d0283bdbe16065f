"""A config-driven regression trainer: ``python cause_config_factory_rate.py --config configs/sgd.json``, the
optimizer built by a factory from the config (``getattr(keras.optimizers, name)(**cfg)``). Used by
tests/test_cause_programs.py, which writes a config whose learning rate is a typo (50.0 for 0.5): the divergence's
line to change is the config file's, as the program's own lines name no optimizer.
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
    parser.add_argument("--config", default="configs/sgd.json")
    args = parser.parse_args()
    with open(args.config) as handle:
        cfg = json.load(handle)

    keras.utils.set_random_seed(cfg["seed"])
    rng = np.random.default_rng(cfg["seed"])
    x = rng.normal(size=(512, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1))).astype("float32")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    model.compile(build_optimizer(cfg["optimizer"]), "mse")
    model.fit(x, y, batch_size=32, epochs=3, verbose=0, callbacks=[NanGuard("captures")])


if __name__ == "__main__":
    main()
