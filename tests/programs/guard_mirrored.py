"""NanGuard and guard_step under tf.distribute.MirroredStrategy on two logical CPUs (run by tests/test_guard_mirrored.py).

Usage: python guard_mirrored.py CAPTURE_DIR MODE[,MODE...]    MODE: fit | fit-skip | loop
Prints one JSON line per mode with what the test checks. The logical devices must be configured before TensorFlow
initializes, hence a separate process.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import guard_models as gm  # noqa: E402
import keras  # noqa: E402

from pyadapter import CaptureBundle, NanGuard, NonFiniteStepError, guard_step  # noqa: E402
from pyadapter.replay.restore import load_model  # noqa: E402


def replicas_agree(strategy, model) -> bool:
    for variable in model.variables:
        values = [t.numpy() for t in strategy.experimental_local_results(variable.value)]
        if not all(np.array_equal(values[0], other) for other in values[1:]):
            return False
    return True


def main() -> int:
    capture_dir, modes = sys.argv[1], sys.argv[2].split(",")
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    for mode in modes:
        run(strategy, os.path.join(capture_dir, mode), mode)
    return 0


def run(strategy, capture_dir: str, mode: str) -> None:
    keras.utils.set_random_seed(30)
    x, y = gm.data(batches=6, bad_batch=3)
    # Put the NaN in the second replica's half of the batch only: the first replica alone would apply its update.
    x[3 * gm.BATCH + 1, 2] = 0.0
    x[3 * gm.BATCH + gm.BATCH // 2 + 1, 2] = np.nan
    out: dict = {"mode": mode, "replicas": strategy.num_replicas_in_sync}
    with strategy.scope():
        model = gm.sequential()
        optimizer = keras.optimizers.Adam(0.01)
        if mode.startswith("fit"):
            model.compile(optimizer, "mse")
        else:
            optimizer.build(model.trainable_variables)  # lazily inside strategy.run fails even without a guard
    if mode.startswith("fit"):
        guard = NanGuard(capture_dir, on_nan="skip" if mode == "fit-skip" else "stop")
        history = model.fit(x, y, batch_size=gm.BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[guard])
        out["losses_finite"] = bool(np.isfinite(history.history["loss"]).all())
        failures = guard.failures
    else:
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)

        def replica_step(bx, by):
            with tf.GradientTape() as tape:
                per_example = tf.reduce_mean(tf.square(model(bx, training=True) - by), axis=1)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=gm.BATCH)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        @guard_step(checkpoint=checkpoint, capture_dir=capture_dir)
        @tf.function
        def train_step(batch):
            per_replica = strategy.run(replica_step, args=batch)
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        dataset = strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices((x, y)).batch(gm.BATCH)
        )
        try:
            for batch in dataset:
                train_step(batch)
        except NonFiniteStepError:
            pass
        failures = train_step.failures
    bundle = CaptureBundle.load(failures[0].bundle)
    batch = bundle.batch() if bundle.kind == "keras_fit" else bundle.step_arguments()[0][0]
    bx = batch[0]
    out.update(
        failure_steps=[f.step for f in failures],
        gradients=failures[0].report.gradients,
        iterations=int(optimizer.iterations.numpy()),
        weights_finite=gm.all_finite(model.get_weights()),
        replicas_agree=replicas_agree(strategy, model),
        batch_matches=bool(np.array_equal(bx, x[3 * gm.BATCH:4 * gm.BATCH], equal_nan=True)),
        bundle_replicas=bundle.model_info.get("num_replicas"),
    )
    if bundle.kind == "keras_fit":
        out["reloaded_weights_match"] = gm.weights_equal(load_model(bundle).get_weights(), model.get_weights())
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
