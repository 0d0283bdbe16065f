"""An example script that trains at module level with a learning-rate schedule of its own: a linear warm-up, then
inverse-square-root decay, the decay written ``rsqrt((step - warmup) / warmup)``. That is NaN during the warm-up
(where ``tf.where`` does not pick it) and +inf at the step the warm-up ends, step 20: training runs fine for 20
steps, then the update at an infinite rate writes non-finite weights from finite gradients. Used by
tests/test_cause_programs.py: the cause must name the rate and the schedule, and the line to change is the decay's
(marked ``# CHANGE``), not the optimizer's and not the model's.

Usage: cause_schedule_inf.py CAPTURE_DIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard


class WarmupInverseSqrt(keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, peak, warmup):
        self.peak, self.warmup = peak, warmup

    def __call__(self, step):
        step = tf.cast(step, "float32")
        warm = self.peak * (step + 1.0) / self.warmup
        decay = self.peak * tf.math.rsqrt((step - self.warmup) / self.warmup)  # CHANGE
        return tf.where(step < self.warmup, warm, decay)

    def get_config(self):
        return {"peak": self.peak, "warmup": self.warmup}


keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 10)).astype("float32")
y = (x @ rng.normal(size=(10, 1))).astype("float32")

model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.Adam(WarmupInverseSqrt(1e-3, warmup=20)), loss="mse")
model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[NanGuard(sys.argv[1])])
