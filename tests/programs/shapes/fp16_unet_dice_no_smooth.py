"""Tiny U-Net for binary segmentation of blobs (synthetic, Kaggle-salt style: many images have no mask) under
mixed_float16, its Dice loss written without a smoothing term: an empty mask predicted empty is 0/0. The float16
sigmoid underflowing to 0 only made it come sooner; the cause was "precision: give the layer dtype=float32", which
trained stuck. The smoothing term at the ratio is the change.
"""
import keras
import numpy as np
import tensorflow as tf
from keras import layers

from pyadapter import NanGuard

keras.mixed_precision.set_global_policy("mixed_float16")  # faster on GPU, as in the Kaggle kernels
keras.utils.set_random_seed(0)

IMG = 32
N = 256
rng = np.random.default_rng(0)


def make_sample(empty):
    img = rng.normal(0.0, 0.1, (IMG, IMG)).astype("float32")
    mask = np.zeros((IMG, IMG), "float32")
    if not empty:
        cy, cx = rng.integers(8, IMG - 8, 2)
        r = rng.integers(3, 7)
        yy, xx = np.mgrid[:IMG, :IMG]
        mask[(yy - cy) ** 2 + (xx - cx) ** 2 <= r * r] = 1.0
        img += mask * 0.8
    return img[..., None], mask[..., None]


pairs = [make_sample(rng.random() < 0.6) for _ in range(N)]
x_train = np.stack([p[0] for p in pairs])
y_train = np.stack([p[1] for p in pairs])
print("empty masks:", int((y_train.reshape(N, -1).sum(1) == 0).sum()), "of", N)


def conv_block(x, filters):
    x = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
    x = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
    return x


def build_unet():
    inputs = keras.Input((IMG, IMG, 1))
    c1 = conv_block(inputs, 8)
    p1 = layers.MaxPooling2D()(c1)
    c2 = conv_block(p1, 16)
    p2 = layers.MaxPooling2D()(c2)
    b = conv_block(p2, 32)
    u2 = layers.Conv2DTranspose(16, 2, strides=2, padding="same")(b)
    c3 = conv_block(layers.concatenate([u2, c2]), 16)
    u1 = layers.Conv2DTranspose(8, 2, strides=2, padding="same")(c3)
    c4 = conv_block(layers.concatenate([u1, c1]), 8)
    outputs = layers.Conv2D(1, 1, activation="sigmoid")(c4)
    return keras.Model(inputs, outputs, name="unet")


def dice_coef(y_true, y_pred):
    y_true = tf.cast(y_true, y_pred.dtype)
    intersection = tf.reduce_sum(y_true * y_pred, axis=[1, 2, 3])
    union = tf.reduce_sum(y_true, axis=[1, 2, 3]) + tf.reduce_sum(y_pred, axis=[1, 2, 3])
    return 2.0 * intersection / union  # ORIGIN: no smooth term, 0/0 when mask and prediction are both empty


def dice_loss(y_true, y_pred):
    return 1.0 - tf.reduce_mean(dice_coef(y_true, y_pred))


model = build_unet()
model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=dice_loss, metrics=["accuracy"])
model.fit(x_train, y_train, batch_size=8, epochs=4, verbose=2, callbacks=[NanGuard("captures")])
