"""A trainer in the model-garden style: a polynomial (linear) decay written by hand as a LearningRateSchedule,
``peak * (1 - step / decay_steps)``, with ``decay_steps`` a flag default shorter than the run and no floor. Past
step 30 the rate is negative: every update climbs the loss until the MSE overflows. Used by
tests/test_cause_programs.py: the cause is the negative rate (the divergence's "lower it, or clip the gradients"
does not help: a lower peak climbs slower), and the line to change is the schedule's (marked ``# CHANGE``).

Usage: cause_linear_decay_past_zero.py [--decay_steps N]
"""

import argparse

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard


class LinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, peak, decay_steps):
        self.peak, self.decay_steps = peak, decay_steps

    def __call__(self, step):
        return self.peak * (1.0 - tf.cast(step, "float32") / self.decay_steps)  # CHANGE

    def get_config(self):
        return {"peak": self.peak, "decay_steps": self.decay_steps}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--decay_steps", type=int, default=30)
    parser.add_argument("--epochs", type=int, default=40)
    args = parser.parse_args()

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 6)).astype("float32") * 3.0
    y = (x @ rng.normal(size=(6, 1))).astype("float32")
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(16), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(LinearDecay(0.01, args.decay_steps)), loss="mse")
    model.fit(x, y, batch_size=32, epochs=args.epochs, verbose=0, callbacks=[NanGuard("captures")])


if __name__ == "__main__":
    main()
