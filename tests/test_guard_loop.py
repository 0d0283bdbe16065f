"""guard_step in custom training loops: the same guarantees as NanGuard, with a tf.train.Checkpoint in the bundle."""

from __future__ import annotations

import json
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


def mse_step(model, optimizer):
    """The custom step of TensorFlow's "writing a training loop" guide: a mean squared error, one update."""

    @tf.function
    def train_step(bx, by):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(bx, training=True) - by))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return train_step


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


class Trainer:
    """A research repo's trainer: ``self.train_step = guard_step(tf.function(self._train_step), ...)`` in
    ``__init__``. Autograph converted the bound method to a function without its ``self``, and the first step
    failed with "missing 1 required positional argument: 'by'" before training began."""

    def __init__(self, capture_dir: Path) -> None:
        self.model = gm.sequential()
        self.optimizer = keras.optimizers.SGD(0.01)
        self.steps_run = 0
        self.train_step = guard_step(
            tf.function(self._train_step), model=self.model, optimizer=self.optimizer, capture_dir=capture_dir
        )

    def _train_step(self, bx, by):
        self.steps_run += 1  # Python: counts traces
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(bx, training=True) - by))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables, strict=True))
        return loss


def test_a_tf_function_of_a_bound_method_trains_and_is_guarded(tmp_path):
    keras.utils.set_random_seed(22)
    x, y = gm.data(batches=4, bad_batch=2)
    trainer = Trainer(tmp_path)
    losses = []
    with pytest.raises(NonFiniteStepError):
        for bx, by in batches(x, y):
            losses.append(float(trainer.train_step(bx, by)))
    assert len(losses) == 2 and all(np.isfinite(losses)), losses
    assert trainer.steps_run >= 1 and int(trainer.optimizer.iterations.numpy()) == 2
    assert gm.all_finite(trainer.model.get_weights())
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert CaptureBundle.load(bundle).step == 2


def test_an_update_that_breaks_the_weights_is_taken_back_in_skip_mode(tmp_path, capsys):
    """A custom loop whose optimizer's update is inf at step 4 (finite rate and gradients), in skip mode, weights checked but not protected (the
    default): the update goes through, the guard re-makes the state step 4 started from out of its window, and
    training goes on from finite weights (each later step at that iteration count fails the same way)."""
    keras.utils.set_random_seed(23)
    x, y = gm.data(batches=7, bad_batch=None)
    model = gm.sequential()
    optimizer = gm.BreaksAtStep(4)
    train_step = mse_step(model, optimizer)
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


class _UnitNormColumns(keras.constraints.Constraint):
    """keras.io-style hand-written unit-norm constraint: w / ||w||, 0 / 0 for a zero column."""

    def __call__(self, w):
        return w / keras.ops.sqrt(keras.ops.sum(keras.ops.square(w), axis=0, keepdims=True))


def test_a_first_update_that_breaks_the_weights_is_taken_back_when_it_built_the_optimizer(tmp_path):
    """A custom loop (Adam, built at its first apply_gradients) whose zero-initialized head has a unit-norm
    constraint: the first update makes the head 0 / 0 = NaN with finite gradients. The window's start copy lacks
    Adam's slots, so the update was left applied: the bundle held NaN weights (state after_update) and its locate
    blamed "weights non-finite when this fit began". The copied state is put back, Adam's slots as a fresh Adam
    makes them."""
    keras.utils.set_random_seed(3)
    x, y = gm.data(batches=3, bad_batch=None)
    model = keras.Sequential(
        [
            keras.Input((x.shape[1],)),
            # All-zero hidden units: no gradient reaches the head, which stays zero.
            keras.layers.Dense(8, activation="relu", kernel_initializer="zeros"),
            keras.layers.Dense(1, kernel_initializer="zeros", kernel_constraint=_UnitNormColumns()),
        ]
    )
    optimizer = keras.optimizers.Adam(1e-3)
    before = [w.copy() for w in model.get_weights()]
    step = guard_step(
        mse_step(model, optimizer), model=model, optimizer=optimizer, capture_dir=tmp_path, locate=False
    )
    with pytest.raises(NonFiniteStepError):
        for bx, by in batches(x, y):
            step(bx, by)
    (failure,) = step.failures
    assert failure.step == 0 and failure.report.update_applied and failure.report.update_taken_back, failure
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), before, strict=True))
    assert int(optimizer.iterations.numpy()) == 0
    slots = [v for v in optimizer.variables if "momentum" in v.path or "velocity" in v.path]
    assert slots and all(not np.any(v.numpy()) for v in slots), [(v.path, v.numpy()) for v in slots]
    bundle = CaptureBundle.load(failure.bundle)
    assert bundle.manifest["state"] == "before_update"


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


def test_guard_step_needs_something_to_gate():
    with pytest.raises(ValueError, match="nothing to gate: no Keras optimizer and no trainable variable"):
        guard_step(lambda: None, checkpoint=tf.train.Checkpoint(step=tf.Variable(0, trainable=False)))


# ---- steps that update by hand (no optimizer) -------------------------------------------------------------------


def log_features_data(bad_batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Positive features that the step takes the log of; one 0 in `bad_batch` makes -inf there and NaN gradients."""
    rng = np.random.default_rng(5)
    x = rng.uniform(0.5, 2.0, size=(gm.BATCH * 6, gm.FEATURES)).astype("float32")
    y = rng.normal(size=(gm.BATCH * 6, 1)).astype("float32")
    x[bad_batch * gm.BATCH + 2, 1] = 0.0
    return x, y


@pytest.mark.parametrize("compiled", [True, False], ids=["tf_function", "eager"])
def test_a_keras_model_updated_by_hand_keeps_its_weights_on_a_failing_step(tmp_path, compiled, capsys):
    """No optimizer: the step writes ``v.assign_sub(lr * g)`` itself. The failing step's writes are held back (the
    weights stay bit for bit as they were), the gradient is named by its variable, and the next steps update."""
    keras.utils.set_random_seed(6)
    x, y = log_features_data(bad_batch=3)
    model = gm.sequential()

    def step(bx, by):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(tf.math.log(bx)) - by))
        grads = tape.gradient(loss, model.trainable_variables)
        for variable, grad in zip(model.trainable_variables, grads, strict=True):
            variable.assign_sub(0.05 * grad)
        return loss

    guarded = guard_step(
        tf.function(step) if compiled else step,
        model=model,
        on_nan="skip",
        capture_dir=tmp_path,
        locate=False,
    )
    weights = []
    for bx, by in batches(x, y):
        before = [w.copy() for w in model.get_weights()]
        guarded(bx, by)
        weights.append((before, model.get_weights()))
    assert [f.step for f in guarded.failures] == [3]
    report = guarded.failures[0].report
    kernel = model.trainable_variables[
        0
    ].path  # "sequential/dense/kernel", numbered by the models made before
    assert not report.update_applied and kernel in report.gradients, report
    unchanged = [all(np.array_equal(a, b) for a, b in zip(*pair, strict=True)) for pair in weights]
    assert unchanged == [False, False, False, True, False, False], "only the failing step wrote nothing"
    assert gm.all_finite(model.get_weights())
    bundle = CaptureBundle.load(guarded.last_bundle)
    assert bundle.manifest["step_function"]["updates_by_hand"] is True
    assert f"step 3: non-finite gradients of {kernel}" in capsys.readouterr().err


class Line(tf.Module):
    """tensorflow.org's "Basic training loops" model: two scalar variables, no Keras."""

    def __init__(self):
        super().__init__()
        self.w = tf.Variable(5.0)
        self.b = tf.Variable(0.0)

    def __call__(self, x):
        return self.w * x + self.b


def test_a_tf_module_trained_by_hand_is_gated_and_its_bundle_holds_it(tmp_path):
    """The tutorial's shape: the module is an argument of the step, the rate a Python float, and the update is
    ``assign`` (a new value) for one variable and ``assign_sub`` for the other. A rate that diverges: the step
    whose loss overflows writes nothing; the bundle holds both variables and names the module argument by class."""
    line = Line()
    x = tf.linspace(-2.0, 2.0, 101)
    y = 3.0 * x + 2.0

    @tf.function
    def train(model, x, y, learning_rate):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(y - model(x)))
        dw, db = tape.gradient(loss, [model.w, model.b])
        model.w.assign(model.w - learning_rate * dw)
        model.b.assign_sub(learning_rate * db)

    guarded = guard_step(
        train, checkpoint=tf.train.Checkpoint(model=line), capture_dir=tmp_path, locate=False
    )
    with pytest.raises(NonFiniteStepError) as raised:
        for _ in range(200):
            w, b = float(line.w.numpy()), float(line.b.numpy())
            guarded(line, x, y, learning_rate=1.2)
    failure = raised.value.failure
    assert failure.report.loss and not failure.report.update_applied, failure.report
    assert (float(line.w.numpy()), float(line.b.numpy())) == (w, b), "the failing step wrote nothing"
    assert np.isfinite([w, b]).all()
    bundle = CaptureBundle.load(guarded.last_bundle)
    weights = dict(bundle.weight_entries())
    assert sorted(weights) == ["model.b", "model.w"] and float(weights["model.w"]) == w, weights
    args, kwargs = bundle.step_arguments()
    assert str(args[0]) == "<Line object>" and kwargs == {"learning_rate": 1.2}, (args, kwargs)


def test_a_tf1_optimizer_in_a_step_without_keras_optimizer_is_refused_not_let_through(tmp_path):
    """A tf.compat.v1.train optimizer writes with its own kernels, past the assign methods the gate holds back: the
    guard said "the update was not applied" while the weights went NaN. It now refuses the step in one line."""
    from pyadapter.capture.gate import GuardError

    line = Line()
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.05)

    @tf.function
    def train(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(line(x)))
        grads = tape.gradient(loss, [line.w, line.b])
        optimizer.apply_gradients(zip(grads, [line.w, line.b], strict=True))
        return loss

    guarded = guard_step(train, checkpoint=tf.train.Checkpoint(model=line), capture_dir=tmp_path)
    with pytest.raises(GuardError, match="cannot gate a tf.compat.v1.train optimizer's update"):
        guarded(tf.ones([4]))
    assert float(line.w.numpy()) == 5.0
    train(tf.ones([4]))  # outside the guard the optimizer is the user's as before
    assert float(line.w.numpy()) != 5.0


def test_a_failing_custom_step_leaves_batch_normalization_statistics_as_they_were(tmp_path):
    keras.utils.set_random_seed(3)
    x, y = gm.data(batches=5, bad_batch=2)
    model = keras.Sequential(
        [
            keras.Input((gm.FEATURES,)),
            keras.layers.Dense(8),
            keras.layers.BatchNormalization(),
            keras.layers.Dense(1),
        ]
    )
    optimizer = keras.optimizers.SGD(0.01)
    train_step = guard_step(
        mse_step(model, optimizer),
        model=model,
        optimizer=optimizer,
        capture_dir=tmp_path,
        on_nan="skip",
        locate=False,
    )
    for bx, by in batches(x, y):
        train_step(bx, by)
    assert [f.step for f in train_step.failures] == [2]
    assert gm.all_finite([v.numpy() for v in model.non_trainable_variables])


@pytest.mark.parametrize("locate", [False, True])
def test_a_step_traced_once_per_python_flag_reads_each_verdict_with_its_own_trace(tmp_path, locate):
    """Gradient accumulation by hand: ``train_step(x, y, apply_now)`` with a Python bool traces twice, one trace
    with the optimizer's update and one without. The guard named a failing step's gradients after the last trace
    made, and a failure in the other one crashed it ("zip() argument 2 is shorter than argument 1"). And the
    failing micro-step's ``total.assign_add(grad)`` went through: a variable the step keeps by hand is now written
    only when the losses and gradients before the write are finite."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(8)
    x = rng.uniform(0.5, 2.0, size=(gm.BATCH * 8, gm.FEATURES)).astype("float32")
    y = rng.normal(size=(gm.BATCH * 8, 1)).astype("float32")
    x[5 * gm.BATCH + 1, 2] = 0.0  # the step takes the log of its features: -inf in step 5
    model = gm.sequential()
    optimizer = keras.optimizers.SGD(0.01)
    optimizer.build(model.trainable_variables)
    accumulated = [tf.Variable(tf.zeros_like(v), trainable=False) for v in model.trainable_variables]

    @guard_step(model=model, optimizer=optimizer, capture_dir=tmp_path, on_nan="skip", locate=locate)
    @tf.function
    def train_step(bx, by, apply_now):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(tf.math.log(bx)) - by))
        grads = tape.gradient(loss, model.trainable_variables)
        for total, grad in zip(accumulated, grads, strict=True):
            total.assign_add(grad)
        if apply_now:
            optimizer.apply_gradients(
                zip([t.read_value() for t in accumulated], model.trainable_variables, strict=True)
            )
            for total in accumulated:
                total.assign(tf.zeros_like(total))
        return loss

    for index, (bx, by) in enumerate(batches(x, y)):
        train_step(bx, by, apply_now=index % 4 == 3)
    failures = train_step.failures
    # Step 5's own sums are held back, so the 4th step applies the 3 good ones (before: step 5's NaN reached
    # the sum and step 7 failed too, its 3 good micro-batches lost).
    assert [f.step for f in failures] == [5]
    # A micro-step applies nothing, but its gradients are checked: log(0) made them NaN, with a finite loss.
    report = failures[0].report
    assert report.gradients == [model.trainable_variables[0].path] and not report.loss, report
    assert gm.all_finite(model.get_weights()) and gm.all_finite([t.numpy() for t in accumulated])
    assert int(optimizer.iterations.numpy()) == 2, "both applying steps (3 and 7) applied"
    # Locating at the scene re-runs the failing step ungated; the sums it wrote are put back with the models'
    # state (before, the re-run left its NaN in them and step 7 failed anyway).
    assert not locate or (failures[0].origin or "").endswith(": Log"), failures[0]
    if locate:
        # findings.json names the bundle it is in (it named "captures/run-step5", a folder that does not exist).
        findings = json.loads((Path(failures[0].bundle) / "findings.json").read_text(encoding="utf-8"))
        assert Path(findings["source"]["path"]) == Path(failures[0].bundle), findings["source"]
