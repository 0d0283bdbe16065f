"""Regression MLP with a learned multiplicative-noise layer (variational-dropout style), whose noise scale alpha is a
raw weight kept from collapsing by a -log(alpha) term: an Adam step carries one unit's alpha below 0."""
import keras
import numpy as np
from keras import ops

from pyadapter import NanGuard


class LearnedGaussianNoise(keras.layers.Layer):
    """x * (1 + alpha * eps) during training; alpha is learned per unit and kept from collapsing by a KL-like term."""

    def __init__(self, kl_weight=1e-4, **kwargs):
        super().__init__(**kwargs)
        self.kl_weight = kl_weight
        self.seed = keras.random.SeedGenerator(42)

    def build(self, input_shape):
        self.alpha = self.add_weight(shape=(input_shape[-1],), initializer=keras.initializers.Constant(0.5),
                                     name="alpha")

    def call(self, x, training=False):
        # variational-dropout KL approximation: -0.5 * log(alpha^2), i.e. -log(alpha)
        self.add_loss(self.kl_weight * ops.mean(-ops.log(self.alpha)))  # ORIGIN
        if training:
            eps = keras.random.normal(ops.shape(x), seed=self.seed)
            return x * (1.0 + self.alpha * eps)
        return x


keras.utils.set_random_seed(5)
rng = np.random.default_rng(5)
X = rng.normal(size=(8192, 10)).astype("float32")
w = rng.normal(size=(10,)).astype("float32")
y = (X @ w + 0.5 * np.sin(3 * X[:, 0]) + rng.normal(0, 0.05, size=8192)).astype("float32")

model = keras.Sequential([
    keras.Input(shape=(10,)),
    keras.layers.Dense(64, activation="relu"),
    LearnedGaussianNoise(),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(1),
])
model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
model.fit(X, y, batch_size=128, epochs=30, validation_split=0.1, verbose=0,
          callbacks=[NanGuard("captures")])
