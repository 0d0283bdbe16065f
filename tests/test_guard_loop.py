"""guard_step in custom training loops: the same guarantees as NanGuard, with a tf.train.Checkpoint in the bundle."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

sys.path.insert(0, str(Path(__file__).parent / "programs"))
import guard_models as gm  # noqa: E402

from pyadapter import CaptureBundle, NonFiniteStepError, guard_step  # noqa: E402
from pyadapter.capture.gate import record_loss  # noqa: E402
from pyadapter.replay.restore import restore_checkpoint  # noqa: E402

pytestmark = pytest.mark.slow


def batches(x, y):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(gm.BATCH)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_tf_function_step_stops_and_checkpoint_restores(tmp_path, jit_compile):
    keras.utils.set_random_seed(20)
    x, y = gm.data(bad_batch=3)
    model = gm.sequential()
    optimizer = keras.optimizers.Adam(0.01)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)

    @guard_step(checkpoint=checkpoint, capture_dir=tmp_path, run_name="loop")
    @tf.function(jit_compile=jit_compile)
    def train_step(bx, by, scale=1.0):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(bx, training=True) - by)) * scale
            if (
                tf.reduce_sum(by) > 1e30
            ):  # tensor-dependent Python `if`: needs autograph, as tf.function had it
                loss = loss * 0.0
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    losses = []
    with pytest.raises(NonFiniteStepError) as raised:
        for bx, by in batches(x, y):
            losses.append(float(train_step(bx, by, scale=1.0)))
    assert len(losses) == 3 and all(np.isfinite(losses))
    failure = raised.value.failure
    assert failure.step == 3 and "step 3" in str(raised.value) and failure.report.gradients
    assert failure.report.loss, "the returned loss was NaN"
    assert int(optimizer.iterations.numpy()) == 3 and gm.all_finite(model.get_weights())
    assert train_step.last_bundle == failure.bundle

    bundle = CaptureBundle.load(failure.bundle)
    assert bundle.kind == "custom_loop" and bundle.step == 3
    assert bundle.manifest["step_function"]["qualname"].endswith("train_step")
    assert bundle.manifest["step_function"]["jit_compile"] is jit_compile
    assert bundle.manifest["checkpoint"]["objects"] == ["model", "optimizer"]
    args, kwargs = bundle.step_arguments()
    ex = x[3 * gm.BATCH : 4 * gm.BATCH]
    assert np.array_equal(args[0], ex, equal_nan=True) and kwargs == {"scale": 1.0}

    keras.utils.set_random_seed(99)
    fresh = gm.sequential()
    fresh_optimizer = keras.optimizers.Adam(0.01)
    fresh_optimizer.build(fresh.trainable_variables)
    restore_checkpoint(bundle, model=fresh, optimizer=fresh_optimizer).assert_consumed()
    assert gm.weights_equal(fresh.get_weights(), model.get_weights())
    assert gm.weights_equal(
        [v.numpy() for v in fresh_optimizer.variables], [v.numpy() for v in optimizer.variables]
    )


def test_eager_step_skip_mode_with_record_loss(tmp_path, capsys):
    """A plain Python step (runs eagerly), model+optimizer given, skip mode; a loss-only failure is caught
    because the step passes its loss to record_loss before applying."""
    keras.utils.set_random_seed(21)
    x, y = gm.data(batches=5, bad_batch=None)
    y[1 * gm.BATCH] = 0.0
    y[3 * gm.BATCH] = 0.0
    model = gm.sequential()
    optimizer = keras.optimizers.SGD(0.01)

    def train_step(bx, by):
        with tf.GradientTape() as tape:
            mse = tf.reduce_mean(tf.square(model(bx, training=True) - by))
        grads = tape.gradient(mse, model.trainable_variables)
        loss = record_loss(mse + 0.0 * tf.math.log(tf.reduce_min(tf.abs(by))))  # -inf*0 = NaN, no gradient
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    step = guard_step(train_step, model=model, optimizer=optimizer, capture_dir=tmp_path, on_nan="skip")
    results = [step(bx, by) for bx, by in batches(x, y)]
    assert len(results) == 5
    assert [f.step for f in step.failures] == [1, 3]
    assert all(f.report.loss and not f.report.gradients for f in step.failures)
    assert int(optimizer.iterations.numpy()) == 3, "5 steps, 2 held back"
    assert gm.all_finite(model.get_weights())
    assert capsys.readouterr().err.count("step skipped") == 2
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2


class InfAtStep(keras.optimizers.schedules.LearningRateSchedule):
    """0.01 / (4 - step): +inf at step 4, so that step's update makes the weights non-finite from finite
    gradients."""

    def __call__(self, step):
        return 0.01 / tf.cast(4 - step, "float32")

    def get_config(self):
        return {}


def test_an_update_that_breaks_the_weights_is_taken_back_in_skip_mode(tmp_path, capsys):
    """A custom loop whose schedule is inf at step 4, in skip mode, weights checked but not protected (the
    default): the update goes through, the guard re-makes the state step 4 started from out of its window, and
    training goes on from finite weights (each later step at that iteration count fails the same way)."""
    keras.utils.set_random_seed(23)
    x, y = gm.data(batches=7, bad_batch=None)
    model = gm.sequential()
    optimizer = keras.optimizers.SGD(InfAtStep())

    @tf.function
    def train_step(bx, by):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(bx, training=True) - by))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    step = guard_step(
        train_step, model=model, optimizer=optimizer, capture_dir=tmp_path, on_nan="skip", locate=False
    )
    before = None
    for index, (bx, by) in enumerate(batches(x, y)):
        if index == 4:
            before = [w.copy() for w in model.get_weights()]
        step(bx, by)
    failures = step.failures
    assert [f.step for f in failures] == [4, 5, 6], failures
    assert all(f.report.weights and f.report.update_applied and f.report.update_taken_back for f in failures)
    assert int(optimizer.iterations.numpy()) == 4 and gm.all_finite(model.get_weights())
    # Re-made, not approximated: the state step 4 started from, as training had it.
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), before, strict=True))
    bundle = CaptureBundle.load(failures[0].bundle)
    assert bundle.manifest["state"] == "before_update"
    assert "took it back (the state before it re-made from the window's copy" in capsys.readouterr().err


def test_guarded_step_must_be_called_eagerly(tmp_path):
    model = gm.sequential()
    optimizer = keras.optimizers.SGD(0.01)

    @guard_step(model=model, optimizer=optimizer, capture_dir=tmp_path)
    def train_step(bx):
        return tf.reduce_sum(bx)

    @tf.function
    def outer(bx):
        return train_step(bx)

    with pytest.raises(Exception, match="call the guarded step from Python"):
        outer(tf.zeros([2, gm.FEATURES]))


def test_guard_step_needs_an_optimizer():
    with pytest.raises(ValueError, match="optimizer"):
        guard_step(lambda: None, model=gm.sequential())
