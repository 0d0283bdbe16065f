"""Keras fit under MultiWorkerMirroredStrategy with NanGuard: one worker of a cluster (TF_CONFIG in the environment).

Usage: python multiworker_train.py CAPTURE_DIR RESULT_JSON [stop|skip]

Each worker feeds its own data (as a worker reading its own files would): worker 1's batch 3 holds one negative
feature, and `sqrt` of it is NaN on worker 1 only. Writes what the test checks to RESULT_JSON.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

BATCH = 4  # per worker (one replica each)
STEPS = 6
BAD_WORKER, BAD_STEP = 1, 3


def worker_data(worker: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(100 + worker)
    x = rng.uniform(0.5, 2.0, (BATCH * STEPS, 3)).astype("float32")
    y = rng.normal(size=(BATCH * STEPS, 1)).astype("float32")
    if worker == BAD_WORKER:
        x[BAD_STEP * BATCH + 1, 0] = -1.0
    return x, y


@keras.saving.register_keras_serializable(package="multiworker")
class RootFeatures(keras.layers.Layer):
    def call(self, x):
        return tf.sqrt(x)  # ORIGIN: a negative feature makes NaN


def make_model() -> keras.Model:
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(4, activation="tanh")(RootFeatures()(inputs))
    model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
    model.compile(keras.optimizers.SGD(0.05), "mse")
    return model


def main() -> int:
    capture_dir, result_path = sys.argv[1], sys.argv[2]
    on_nan = sys.argv[3] if len(sys.argv) > 3 else "stop"
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=120)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    task = strategy.cluster_resolver.task_id
    keras.utils.set_random_seed(7)
    with strategy.scope():
        model = make_model()

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        x, y = worker_data(context.input_pipeline_id)
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(context.get_per_replica_batch_size(BATCH * 2))

    dataset = strategy.distribute_datasets_from_function(dataset_fn)
    from pyadapter import NanGuard

    guard = NanGuard(capture_dir, on_nan=on_nan)  # also lets Keras 3 fit start under this strategy (keras-team/keras#20585)
    history = model.fit(dataset, epochs=1, steps_per_epoch=STEPS, callbacks=[guard], verbose=0)
    weights = [np.asarray(v.numpy()) for v in model.trainable_variables]
    result = {
        "task": task,
        "iterations": int(model.optimizer.iterations.numpy()),
        "losses": [float(v) for v in history.history.get("loss", [])],
        "weights_finite": all(bool(np.isfinite(w).all()) for w in weights),
        "weights_sum": float(sum(float(np.sum(w, dtype=np.float64)) for w in weights)),
        "failures": [
            {"step": f.step, "bundle": str(f.bundle) if f.bundle else None, "error": f.bundle_error,
             "action": f.action}
            for f in guard.failures
        ],
    }
    with open(result_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
