"""Run as `python -m trainer.train --epochs 2` from the project root: relative imports, argparse."""
import argparse

import keras
import numpy as np

from pyadapter import NanGuard

from .model import build


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 3.0, size=(320, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    x[200, 1] = 0.0
    model = build()
    model.compile("adam", "mse")
    model.fit(x, y, batch_size=32, epochs=args.epochs, callbacks=[NanGuard("captures")], verbose=0)


if __name__ == "__main__":
    main()
