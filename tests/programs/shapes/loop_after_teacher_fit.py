"""Distilling a mixed-precision teacher into a float32 student: the teacher is trained with fit, then the student
in a custom loop guarded with guard_step, reading the teacher's float16 logits (a softmax by hand overflows
float16's exp). The re-entry took the teacher's fit over and refused it: "the bundle was captured by guard_step,
but the program reached Keras fit first" (s40f p6)."""
import keras
import numpy as np
import tensorflow as tf
from keras import layers

from pyadapter import guard_step

keras.utils.set_random_seed(5)
rng = np.random.default_rng(5)
NUM_CLASSES, TEMPERATURE = 10, 1.0
centers = rng.normal(0, 5.0, size=(NUM_CLASSES, 32)).astype("float32")
y_all = rng.integers(0, NUM_CLASSES, size=4000)
x_all = (centers[y_all] + rng.normal(0, 1, size=(4000, 32))).astype("float32")

keras.mixed_precision.set_global_policy("mixed_float16")
teacher = keras.Sequential([keras.Input((32,)), layers.Dense(256, activation="relu"),
                            layers.Dense(256, activation="relu"), layers.Dense(NUM_CLASSES),
                            layers.Activation("linear", dtype="float32")], name="teacher")
teacher.compile(optimizer=keras.optimizers.Adam(1e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
teacher.fit(x_all, y_all, batch_size=128, epochs=3, verbose=0)
keras.mixed_precision.set_global_policy("float32")

student = keras.Sequential([keras.Input((32,)), layers.Dense(32, activation="relu"), layers.Dense(NUM_CLASSES)],
                           name="student")
optimizer = keras.optimizers.Adam(1e-3)
ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
teacher_body = keras.Model(teacher.inputs, teacher.layers[-2].output)  # the float16 logits


@guard_step(capture_dir="captures", model=student, optimizer=optimizer)
@tf.function
def train_step(x, y):
    t_logits = teacher_body(x, training=False)
    e = tf.exp(t_logits / TEMPERATURE)
    p_teacher = e / tf.reduce_sum(e, axis=-1, keepdims=True)
    with tf.GradientTape() as tape:
        s_logits = student(x, training=True)
        log_p = tf.nn.log_softmax(s_logits / TEMPERATURE)
        kd = -tf.reduce_mean(tf.reduce_sum(tf.cast(p_teacher, tf.float32) * log_p, axis=-1)) * TEMPERATURE**2
        loss = 0.3 * ce(y, s_logits) + 0.7 * kd
    grads = tape.gradient(loss, student.trainable_variables)
    optimizer.apply_gradients(zip(grads, student.trainable_variables))
    return loss


dataset = tf.data.Dataset.from_tensor_slices((x_all, y_all)).shuffle(4000, seed=5).batch(64)
for epoch in range(2):
    for x, y in dataset:
        loss = train_step(x, y)
