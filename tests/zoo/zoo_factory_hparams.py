"""Zoo: a model built by a factory from a hyperparameter dict, with a custom GeM pooling layer (pow of zero).

``make_model(hp)`` stacks ReLU convolutions and a generalized-mean (GeM) pooling layer with a learnable
exponent p: (mean(x^p))^(1/p). The GeM paper clamps x to a small epsilon first; this version does not. Some
clips in the data set are silent (the microphone was muted): every ReLU channel whose bias is not positive is
exactly 0 over the whole clip, the mean is 0, and the gradient of m^(1/p) at m = 0 is (1/p) * 0^(1/p - 1) = inf;
times the zero gradient of x^p it becomes NaN. The forward pass stays finite; the backward pass does not.
Fix: ``tf.pow(tf.maximum(inputs, 1e-6), self.p)`` (the clamp in the GeM paper).

Training runs at module level, in ``run_experiment(hp)`` called at the bottom of the file.
"""
# CAUSE: op: a wrong op on finite, in-range inputs

import os
import sys

import keras
import numpy as np
import tensorflow as tf
from keras import layers

from pyadapter import NanGuard


class GeMPooling1D(layers.Layer):
    """Generalized-mean pooling over time: p = 1 is average pooling, p -> inf is max pooling."""

    def __init__(self, p=3.0, trainable_p=True, **kwargs):
        super().__init__(**kwargs)
        self.initial_p = p
        self.trainable_p = trainable_p

    def build(self, input_shape):
        self.p = self.add_weight(
            shape=(), initializer=keras.initializers.Constant(self.initial_p), trainable=self.trainable_p, name="p"
        )

    def call(self, inputs):
        return tf.pow(tf.reduce_mean(tf.pow(inputs, self.p), axis=1), 1.0 / self.p)  # ORIGIN: a channel that is 0 over a whole clip: the gradient of 0^(1/p) is inf, times 0 = NaN

    def get_config(self):
        return {**super().get_config(), "p": self.initial_p, "trainable_p": self.trainable_p}


def make_model(hp: dict) -> keras.Model:
    inputs = keras.Input(shape=(hp["clip_length"], 1))
    x = inputs
    for _ in range(hp["conv_blocks"]):
        x = layers.Conv1D(hp["filters"], hp["kernel_size"], padding="same", activation="relu")(x)
    x = GeMPooling1D(p=hp["gem_p"], trainable_p=hp["learn_p"])(x)
    x = layers.Dropout(hp["dropout"])(x)
    outputs = layers.Dense(hp["num_classes"], activation="softmax")(x)
    model = keras.Model(inputs, outputs, name=f"gem_cnn_{hp['filters']}x{hp['conv_blocks']}")
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=hp["learning_rate"]),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def make_clips(hp: dict, n: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Noisy tones of three pitches; a few clips are silent (all zeros)."""
    rng = np.random.default_rng(hp["seed"])
    t = np.arange(hp["clip_length"], dtype="float32") / hp["clip_length"]
    labels = rng.integers(0, hp["num_classes"], size=n)
    pitch = np.array([3.0, 5.0, 8.0], dtype="float32")[labels]
    clips = np.sin(2 * np.pi * pitch[:, None] * t[None, :] + rng.uniform(0, 2 * np.pi, size=(n, 1)))
    clips = clips + 0.3 * rng.normal(size=clips.shape)
    muted = rng.random(n) < 0.003
    clips[muted] = 0.0
    return clips[..., None].astype("float32"), labels


def run_experiment(hp: dict) -> tuple[keras.Model, keras.callbacks.History]:
    keras.utils.set_random_seed(hp["seed"])
    x, y = make_clips(hp)
    model = make_model(hp)
    history = model.fit(
        x, y, batch_size=hp["batch_size"], epochs=hp["epochs"], validation_split=0.1, verbose=0,
        callbacks=[NanGuard(os.environ.get("NANLENS_CAPTURE_DIR", "captures"))],
    )
    return model, history


hparams = {
    "seed": 3,
    "clip_length": 64,
    "conv_blocks": 1,
    "filters": 16,
    "kernel_size": 5,
    "gem_p": 3.0,
    "learn_p": True,
    "dropout": 0.1,
    "num_classes": 3,
    "learning_rate": 1e-3,
    "batch_size": 32,
    "epochs": 5,
}
model, history = run_experiment(hparams)

losses = history.history.get("loss", [])
weights_finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
non_finite = bool(model.stop_training) or not np.all(np.isfinite(losses)) or not weights_finite
print("zoo: training went non-finite" if non_finite else "zoo: training stayed finite")
sys.exit(1 if non_finite else 0)
