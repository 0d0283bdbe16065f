"""A DQN-style loop: the guarded step trains the online network and only reads a target network, which the loop
syncs with set_weights every few steps. After a sync the target's output is negative and the Bellman target's
log makes NaN. Guarded as the README says (model= and optimizer= of what the step trains), the bundle holds the
online network and, by its module-level name, the target it reads; with the target in checkpoint= (``python
loop_target_network.py checkpoint``) it holds both too. Kept in a dict (``python loop_target_network.py dict``), the
target has no name of the program's: the bundle does not hold it, and the guard says so.

Usage: loop_target_network.py [checkpoint | dict]
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from pyadapter import guard_step

keras.utils.set_random_seed(0)
online = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
target = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
target.set_weights([np.ones((2, 1), "float32"), np.array([10.0], "float32")])
optimizer = keras.optimizers.SGD(0.01)
NETS = {}
if sys.argv[1:] == ["dict"]:
    NETS = {"target": target}
    del target  # the program's only name for it is now the dict's key
if sys.argv[1:] == ["checkpoint"]:
    guard = guard_step(capture_dir="captures", checkpoint=tf.train.Checkpoint(model=online, optimizer=optimizer, target=target))
else:
    guard = guard_step(capture_dir="captures", model=online, optimizer=optimizer)


@guard
@tf.function
def train_step(states):
    bellman = tf.math.log(NETS["target"](states) if NETS else target(states))  # ORIGIN
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((online(states) - bellman) ** 2)
    grads = tape.gradient(loss, online.trainable_variables)
    optimizer.apply_gradients(zip(grads, online.trainable_variables))
    return loss


states = np.ones((4, 2), "float32")
for step in range(10):
    if step == 5:  # sync the target network (here with values that make its output negative)
        (NETS.get("target") or target).set_weights([-np.ones((2, 1), "float32"), np.array([-10.0], "float32")])
    train_step(states)
