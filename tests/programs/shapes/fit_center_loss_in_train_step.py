"""Softmax plus center loss (Wen et al. 2016) in a keras.Model subclass with constructor arguments, trained with fit.

The centers are a non-trainable weight (``add_weight(trainable=False)``) that the model's own train_step updates by
hand after ``apply_gradients``, with the paper's rule less its ``1 +``: a class missing from the batch has a count of
0 and a sum of 0, so 0/0 is written into the centers at step 0, while the loss and gradients are finite."""
import keras
import numpy as np
import tensorflow as tf

from pyadapter import NanGuard

keras.utils.set_random_seed(42)

NUM_CLASSES = 10


class CenterLossModel(keras.Model):
    def __init__(self, num_classes, alpha=0.5, lam=0.1, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.alpha = alpha
        self.lam = lam
        self.body = keras.layers.Dense(2)
        self.classifier = keras.layers.Dense(num_classes)
        self.centers = self.add_weight(
            name="centers", shape=(num_classes, 2), initializer="zeros", trainable=False
        )
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def call(self, x, training=False):
        feat = self.body(x)
        return feat, self.classifier(feat)

    def train_step(self, data):
        x, y = data
        y = tf.cast(y, tf.int32)
        with tf.GradientTape() as tape:
            feat, logits = self(x, training=True)
            ce = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            c_batch = tf.gather(self.centers, y)
            center_loss = 0.5 * tf.reduce_mean(tf.reduce_sum(tf.square(feat - c_batch), axis=1))
            loss = ce + self.lam * center_loss
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        onehot = tf.one_hot(y, self.num_classes)
        n_c = tf.reduce_sum(onehot, axis=0)
        diff_sum = tf.matmul(onehot, c_batch - feat, transpose_a=True)
        delta = diff_sum / n_c[:, None]  # ORIGIN
        self.centers.assign_sub(self.alpha * delta)
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}

    @property
    def metrics(self):
        return [self.loss_tracker]


rng = np.random.default_rng(42)
y = rng.integers(0, NUM_CLASSES, 256)
x = (rng.normal(scale=3.0, size=(NUM_CLASSES, 8))[y] + rng.normal(size=(256, 8))).astype("float32")

model = CenterLossModel(NUM_CLASSES)
model.compile(optimizer=keras.optimizers.Adam(1e-3))
model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[NanGuard("captures")])
finite = all(bool(np.isfinite(w).all()) for w in model.get_weights())
print(f"weights finite after the stop: {finite}")
