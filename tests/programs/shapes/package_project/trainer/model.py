import keras
import tensorflow as tf


class LogScale(keras.layers.Layer):
    def call(self, x):
        return tf.math.log(x)  # ORIGIN


def build():
    return keras.Sequential(
        [keras.Input((4,)), LogScale(), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
