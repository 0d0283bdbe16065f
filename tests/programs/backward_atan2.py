"""A phase loss: atan2 of a zero-padded bin is finite going forward (atan2(0, 0) = 0); its gradient x / (x**2 +
y**2) is 0 / 0 there (backward pass only). The line before reads the real part alone (a magnitude's square)."""

import tensorflow as tf

real = tf.Variable([0.0, 3.0, 1.0])
imag = tf.Variable([0.0, 4.0, -1.0])


@tf.function
def gradient():
    with tf.GradientTape() as tape:
        re, im = real * 1.0, imag * 1.0  # the model's estimate, read by both lines below
        magnitude = tf.reduce_mean(re**2 + 1.0)
        phase = tf.math.atan2(im, re)  # ORIGIN
        loss = magnitude + tf.reduce_mean(1.0 - tf.cos(phase))
    return tape.gradient(loss, [real, imag])


print([g.numpy() for g in gradient()])
