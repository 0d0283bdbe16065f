"""Zoo: a subclassed keras.Model whose constructor takes hyperparameters (a focal loss with gamma below 1).

``FocalClassifier(hidden_units, dropout_rate, num_classes, gamma)`` creates its layers in ``__init__`` and has no
``build()`` or ``get_config()``; its own ``train_step`` computes a focal loss by hand:
-(1 - p)^gamma * log(p) on the true class. With gamma = 0.5 the modulating factor has an infinite slope at
p = 1: once the classifier is sure of an example, its softmax probability rounds to exactly 1.0 in float32 (a
logit gap past ~17), (1 - p)^0.5 = 0^0.5 and its gradient 0.5 * 0^-0.5 = inf, times the zero cross-entropy
of that example: NaN in the backward pass only (the loss itself stays finite).
Fix: clamp the base, ``tf.pow(tf.maximum(1.0 - p, 1e-7), gamma)``, or use gamma >= 1
(``keras.losses.CategoricalFocalCrossentropy`` clips p).

The script trains at module level.
"""
# CAUSE: op: a wrong op on finite, in-range inputs

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard


class FocalClassifier(keras.Model):
    def __init__(self, hidden_units=64, dropout_rate=0.2, num_classes=3, gamma=2.0, **kwargs):
        super().__init__(**kwargs)
        self.gamma = gamma
        self.num_classes = num_classes
        self.hidden = keras.layers.Dense(hidden_units, activation="relu")
        self.dropout = keras.layers.Dropout(dropout_rate)
        self.out = keras.layers.Dense(num_classes)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.accuracy = keras.metrics.CategoricalAccuracy(name="accuracy")

    def call(self, inputs, training=False):
        h = self.hidden(inputs)
        h = self.dropout(h, training=training)
        return self.out(h)

    @property
    def metrics(self):
        return [self.loss_tracker, self.accuracy]

    def train_step(self, data):
        x, y = data
        y_onehot = tf.one_hot(tf.cast(y, tf.int32), self.num_classes)
        with tf.GradientTape() as tape:
            logits = self(x, training=True)
            p = tf.nn.softmax(logits)
            p_true = tf.reduce_sum(y_onehot * p, axis=-1)
            modulating = tf.pow(1.0 - p_true, self.gamma)  # ORIGIN: gamma < 1: the slope of (1 - p)^gamma is inf at p = 1.0, inf * 0 = NaN
            ce = -tf.math.log(p_true)
            loss = tf.reduce_mean(modulating * ce)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.loss_tracker.update_state(loss)
        self.accuracy.update_state(y_onehot, logits)
        return {m.name: m.result() for m in self.metrics}


# Three well separated blobs in 10 dimensions.
rng = np.random.default_rng(7)
centers = rng.normal(scale=4.0, size=(3, 10)).astype("float32")
labels = rng.integers(0, 3, size=3000)
features = (centers[labels] + rng.normal(size=(3000, 10))).astype("float32")

keras.utils.set_random_seed(7)
model = FocalClassifier(hidden_units=64, dropout_rate=0.1, num_classes=3, gamma=0.5)
model.compile(optimizer=keras.optimizers.Adam(learning_rate=3e-3))
history = model.fit(
    features, labels, batch_size=64, epochs=40, verbose=0,
    callbacks=[NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))],
)

losses = history.history.get("loss", [])
weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
non_finite = bool(model.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
sys.exit(1 if non_finite else 0)
