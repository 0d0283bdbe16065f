"""Gamma regression of daily rainfall amounts (mm) from weather-station features, with a small Trainer class
around a tf.GradientTape loop: the step is a tf.function method, guarded through the instance in __init__, and the
class has a ``fit`` method of its own. Dry days (0 mm) go into the Gamma likelihood's log(y)."""
import numpy as np
import tensorflow as tf

from pyadapter import guard_step


def gamma_log_prob(y, concentration, rate):
    return (
        concentration * tf.math.log(rate)
        + (concentration - 1.0) * tf.math.log(y)  # ORIGIN
        - rate * y
        - tf.math.lgamma(concentration)
    )


class Trainer:
    def __init__(self, n_features, learning_rate=3e-3, batch_size=128):
        self.batch_size = batch_size
        self.model = tf.keras.Sequential(
            [
                tf.keras.layers.Input(shape=(n_features,)),
                tf.keras.layers.Dense(32, activation="tanh"),
                tf.keras.layers.Dense(2),
            ]
        )
        self.optimizer = tf.keras.optimizers.Adam(learning_rate)
        self.step = guard_step(capture_dir="captures", model=self.model, optimizer=self.optimizer)(
            self._train_step
        )

    @tf.function
    def _train_step(self, x, y):
        with tf.GradientTape() as tape:
            out = self.model(x, training=True)
            concentration = tf.exp(out[:, :1])
            rate = tf.exp(out[:, 1:])
            loss = -tf.reduce_mean(gamma_log_prob(y, concentration, rate))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss

    def fit(self, x, y, epochs):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=1).batch(self.batch_size)
        for epoch in range(epochs):
            losses = [float(self.step(xb, yb)) for xb, yb in ds]
            print(f"epoch {epoch + 1}: nll {np.mean(losses):.3f}")


def station_data(n=1000, seed=2):
    rng = np.random.default_rng(seed)
    humidity = rng.uniform(30, 100, n)
    pressure = rng.normal(1013, 8, n)
    cloud = rng.uniform(0, 8, n)
    wet = rng.random(n) < 0.1 + 0.8 * (humidity - 30) / 70 * (cloud / 8)
    amount = np.where(wet, rng.gamma(0.8, 6.0, n), 0.0).round(1)  # gauges read to 0.1 mm
    x = np.stack([humidity, pressure, cloud], 1).astype(np.float32)
    x = (x - x.mean(0)) / x.std(0)
    return x, amount[:, None].astype(np.float32)


if __name__ == "__main__":
    x, rain_mm = station_data()
    trainer = Trainer(n_features=x.shape[1])
    trainer.fit(x, rain_mm, epochs=3)
