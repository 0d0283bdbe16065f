"""NanGuard in Keras fit: every model style stops (or skips) at the bad step, before its update, and writes a bundle
that reloads to the same batch and weights."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

sys.path.insert(0, str(Path(__file__).parent / "programs"))
import guard_models as gm  # noqa: E402

from pyadapter import CaptureBundle, NanGuard  # noqa: E402
from pyadapter.replay.restore import load_model, restore_rng  # noqa: E402

pytestmark = pytest.mark.slow


def fit(model, x, y, guard, epochs=1, **kwargs):
    return model.fit(
        x, y, batch_size=gm.BATCH, epochs=epochs, shuffle=False, verbose=0, callbacks=[guard], **kwargs
    )


def bad_batch(x, y, index):
    return x[index * gm.BATCH : (index + 1) * gm.BATCH], y[index * gm.BATCH : (index + 1) * gm.BATCH]


def test_sequential_stops_before_the_bad_update_and_bundle_reloads(tmp_path, capsys):
    keras.utils.set_random_seed(1)
    x, y = gm.data(bad_batch=3)
    model = gm.sequential()
    model.compile(keras.optimizers.Adam(0.01), "mse")
    guard = NanGuard(tmp_path, run_name="seq")
    history = fit(model, x, y, guard, epochs=2)

    assert [f.step for f in guard.failures] == [3]
    assert int(model.optimizer.iterations.numpy()) == 3, "three good updates, the fourth held back"
    assert len(history.history["loss"]) == 1, "training stopped in the first epoch"
    assert gm.all_finite(model.get_weights())
    message = capsys.readouterr().err
    assert "step 3" in message and "was not applied" in message and str(guard.last_bundle) in message

    bundle = CaptureBundle.load(guard.last_bundle)
    assert (
        bundle.path.name == "seq-step3" and bundle.step == 3 and bundle.epoch == 0 and bundle.batch_index == 3
    )
    report = bundle.non_finite
    assert report.loss and not report.update_applied
    # Keras numbers layer names per process (sequential_2/dense_3 after other tests): ask the model for its path.
    assert model.layers[0].kernel.path in report.gradients
    bx, by = bundle.batch()
    ex, ey = bad_batch(x, y, 3)
    assert np.array_equal(bx, ex, equal_nan=True) and np.array_equal(by, ey)
    restored = load_model(bundle)
    assert gm.weights_equal(restored.get_weights(), model.get_weights())
    assert gm.weights_equal(
        [v.numpy() for v in restored.optimizer.variables], [v.numpy() for v in model.optimizer.variables]
    )
    assert bundle.weights()[model.layers[0].kernel.path].shape == (gm.FEATURES, 6)
    assert [h["step"] for h in bundle.loss_history] == [0, 1, 2, 3]
    assert bundle.loss_history[-1]["loss"] is None and bundle.loss_history[0]["loss"] > 0
    # The entry script is the program that ran: pytest's, except in a pytest-xdist worker (`python -c ...`, none).
    assert (bundle.entry_script is not None) == ("PYTEST_XDIST_WORKER" not in os.environ)
    assert bundle.versions["keras"] == keras.__version__


def test_guarded_training_equals_plain_training_when_healthy(tmp_path):
    x, y = gm.data(bad_batch=None)
    models = []
    for guard in (None, NanGuard(tmp_path)):
        keras.utils.set_random_seed(2)
        model = gm.sequential()
        model.compile(keras.optimizers.Adam(0.01), "mse")
        model.fit(
            x, y, batch_size=gm.BATCH, epochs=2, shuffle=False, verbose=0, callbacks=[guard] if guard else []
        )
        models.append(model)
    assert gm.weights_equal(models[0].get_weights(), models[1].get_weights())
    assert not list(tmp_path.iterdir()), "no bundle for a healthy run"
    # After fit the model's own train function is back: a later plain fit does not run the guard.
    from pyadapter.capture.guard import GuardedTrainFunction

    assert not isinstance(models[1].train_function, GuardedTrainFunction)


def test_functional_dict_inputs_sample_weights_skip_mode(tmp_path, capsys):
    keras.utils.set_random_seed(3)
    x, y = gm.data(batches=5, bad_batch=2)
    rng = np.random.default_rng(4)
    inputs = {"a": x, "b": rng.normal(size=(len(x), 2)).astype("float32")}
    weights = rng.uniform(0.5, 1.5, size=len(x)).astype("float32")
    model = gm.functional_dict()
    model.compile(keras.optimizers.SGD(0.05), "mse", metrics=["mae"])
    guard = NanGuard(tmp_path, on_nan="skip", run_name="dict")
    history = fit(model, inputs, y, guard, epochs=2, sample_weight=weights)

    assert [f.step for f in guard.failures] == [2, 7], "the bad batch fails in both epochs, training goes on"
    assert all(f.action == "skipped" for f in guard.failures)
    assert int(model.optimizer.iterations.numpy()) == 8, "10 steps, 2 skipped"
    assert np.isfinite(history.history["loss"]).all() and np.isfinite(history.history["mae"]).all(), (
        "the skipped step's loss must not poison the epoch's metrics"
    )
    assert gm.all_finite(model.get_weights())
    assert "step skipped" in capsys.readouterr().err

    bundle = CaptureBundle.load(tmp_path / "dict-step2")
    data = bundle.batch()
    assert isinstance(data, tuple) and len(data) == 3 and set(data[0]) == {"a", "b"}
    sl = slice(2 * gm.BATCH, 3 * gm.BATCH)
    assert np.array_equal(data[0]["a"], inputs["a"][sl], equal_nan=True)
    assert np.array_equal(data[0]["b"], inputs["b"][sl])
    assert np.array_equal(data[2], weights[sl])
    assert bundle.manifest["on_nan"] == "skip"


def test_subclassed_custom_train_step_with_dropout_under_xla(tmp_path):
    keras.utils.set_random_seed(5)
    x, y = gm.data(bad_batch=4)
    model = gm.DropoutNet()
    model.compile(keras.optimizers.Adam(0.01), "mse", jit_compile=True)
    guard = NanGuard(tmp_path, run_name="sub")
    fit(model, x, y, guard)
    assert [f.step for f in guard.failures] == [4]
    assert model.seen_steps >= 1, "the model's own train_step ran"
    assert gm.all_finite(model.get_weights())

    bundle = CaptureBundle.load(guard.last_bundle)
    assert bundle.model_info["jit_compile"] is True and bundle.model_info["class_name"] == "DropoutNet"
    bx, by = bundle.batch()
    assert np.array_equal(bx, bad_batch(x, y, 4)[0], equal_nan=True)
    seeds = bundle.rng["keras_seed_generators"]
    assert len(seeds) == 1, "the dropout layer's seed generator state is captured"
    restored = load_model(bundle)
    assert isinstance(restored, gm.DropoutNet)
    assert gm.weights_equal(restored.get_weights(), model.get_weights())
    # The seed state in the bundle is the one from before the failing step: replaying draws the same mask.
    from pyadapter.capture.rng import seed_generator_states

    (state,) = seeds.values()
    ((_, live_variable),) = seed_generator_states(model)
    assert list(live_variable.numpy()) != state, "the failing step itself advanced the live generator"
    ((_, restored_variable),) = seed_generator_states(restored)
    restore_rng(bundle, restored)  # model.keras does not store seed states; the manifest does
    assert list(restored_variable.numpy()) == state
    assert [list(v) for k, v in bundle.weights().items() if "seed_generator" in k] == [state]


def test_manual_train_step_loss_only_failure(tmp_path):
    """The gradients are finite but the loss is not (a stop_gradient'ed term): only the loss check sees it."""
    keras.utils.set_random_seed(6)
    x, y = gm.data(bad_batch=None)
    y[2 * gm.BATCH] = 0.0

    def loss_with_broken_log(y_true, y_pred):
        penalty = tf.stop_gradient(tf.math.log(tf.reduce_min(tf.abs(y_true))))  # -inf when a target is 0
        return tf.reduce_mean(tf.square(y_true - y_pred)) + 0.0 * penalty

    model = gm.ManualStepNet()
    model.compile(keras.optimizers.SGD(0.01), loss=loss_with_broken_log)
    guard = NanGuard(tmp_path)
    fit(model, x, y, guard)
    assert [f.step for f in guard.failures] == [2]
    report = guard.failures[0].report
    assert report.loss and report.gradients == [] and not report.update_applied
    assert int(model.optimizer.iterations.numpy()) == 2


def test_loss_scale_optimizer_skips_are_not_failures(tmp_path):
    keras.utils.set_random_seed(7)
    x, y = gm.data(batches=8, bad_batch=6)
    model = keras.Sequential(
        [
            keras.Input((gm.FEATURES,)),
            keras.layers.Dense(6, activation="tanh", dtype="mixed_float16"),
            keras.layers.Dense(1, dtype="float32"),
        ]
    )
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.01), initial_scale=2.0**40)
    model.compile(optimizer, "mse")
    guard = NanGuard(tmp_path)
    fit(model, x, y, guard)
    scale = float(optimizer.dynamic_scale.numpy())
    assert scale < 2.0**40, "the loss scale optimizer skipped overflowing steps on purpose"
    assert [f.step for f in guard.failures] == [6], "only the NaN batch is a failure"
    assert guard.failures[0].report.loss and guard.failures[0].report.gradients == []
    assert gm.all_finite(model.get_weights())


def test_steps_per_execution(tmp_path):
    keras.utils.set_random_seed(8)
    x, y = gm.data(batches=6, bad_batch=3)
    model = gm.sequential()
    model.compile(keras.optimizers.SGD(0.01), "mse", steps_per_execution=2)
    guard = NanGuard(tmp_path)
    fit(model, x, y, guard)
    assert [f.step for f in guard.failures] == [3]
    assert int(model.optimizer.iterations.numpy()) == 3


class DivideByZeroSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """A learning-rate bug: 0.01 / (2 - step) is +inf at step 2, so finite gradients give infinite weights."""

    def __call__(self, step):
        return 0.01 / tf.cast(2 - step, "float32")

    def get_config(self):
        return {}


@pytest.mark.parametrize("mode", ["protect", "check", "check-no-window", "off"])
def test_a_schedule_s_non_finite_rate_is_held_back_before_the_update(tmp_path, mode):
    """A schedule that is inf at step 2 (0.01 / (2 - step)): the guard computes the schedule's rate in the step and
    does not apply the update, whatever the weights checks and the window: the tutorial Transformer's schedule with
    ``warmup_steps=0`` (NaN at step 0, a subclassed model built by its first step, so no window copy) had its
    update applied, every weight NaN in the bundle, and a replay that reproduced another failure."""
    keras.utils.set_random_seed(9)
    x, y = gm.data(batches=5, bad_batch=None)
    model = gm.sequential()
    model.compile(keras.optimizers.SGD(DivideByZeroSchedule()), "mse")
    guard = NanGuard(
        tmp_path,
        protect_weights=mode == "protect",
        check_weights=mode != "off",
        window=0 if mode == "check-no-window" else 16,
    )
    fit(model, x, y, guard)
    failure = guard.failures[0]
    assert failure.step == 2 and failure.report.learning_rate, failure.report
    assert not failure.report.update_applied and gm.all_finite(model.get_weights())
    assert int(model.optimizer.iterations.numpy()) == 2
    bundle = CaptureBundle.load(guard.last_bundle)
    assert bundle.manifest["state"] == "before_update"
    assert gm.all_finite(list(bundle.weights().values()))
    # The rate the failing step used, evaluated at it: the cause (`pyadapter.cause`) names the schedule.
    rate = bundle.manifest["learning_rate"]
    assert rate["value"] == "inf" and rate["schedule"] == "DivideByZeroSchedule", rate
    assert rate["line"] == DivideByZeroSchedule.__call__.__code__.co_firstlineno + 1, rate


@pytest.mark.parametrize("mode", ["protect", "check", "check-no-window", "off"])
def test_weights_check_catches_an_optimizer_that_breaks_the_weights(tmp_path, mode):
    keras.utils.set_random_seed(9)
    x, y = gm.data(batches=5, bad_batch=None)
    model = gm.sequential()
    model.compile(gm.BreaksAtStep(2), "mse")
    guard = NanGuard(
        tmp_path,
        protect_weights=mode == "protect",
        check_weights=mode != "off",
        window=0 if mode == "check-no-window" else 16,
    )
    fit(model, x, y, guard)
    failure = guard.failures[0]
    report = failure.report
    bundle = CaptureBundle.load(guard.last_bundle)
    if mode == "off":
        # Unchecked, the broken update goes through; the next step fails and names the weights it found broken.
        assert failure.step == 3 and report.weights_before_step and report.weights, report
        assert bundle.manifest["state"] == "after_update"
        return
    assert failure.step == 2
    assert report.weights and not report.gradients and not report.loss and not report.learning_rate, report
    if mode == "protect":
        assert not report.update_applied and gm.all_finite(model.get_weights())
        assert int(model.optimizer.iterations.numpy()) == 2, "the undo restores the optimizer state too"
        assert bundle.manifest["state"] == "before_update"
    elif mode == "check":
        # No copy before the update, but the window's: the state the step started from is re-made from it (the
        # copy of step 0 or 1 and the steps since re-run), so training is not left on non-finite weights and the
        # bundle holds the finite state its replay starts from.
        assert report.update_applied and report.update_taken_back, report
        assert gm.all_finite(model.get_weights()) and int(model.optimizer.iterations.numpy()) == 2
        assert bundle.manifest["state"] == "before_update"
        assert bundle.manifest["non_finite"]["update_taken_back"] is True
        assert "was taken back" in failure.message()
        assert gm.all_finite(list(bundle.weights().values()))
    else:
        # Without any copy the update cannot be held back; the bundle says so.
        assert report.update_applied and not report.update_taken_back
        assert not gm.all_finite(model.get_weights())
        assert bundle.manifest["state"] == "after_update"


def embedding_model() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((4,), dtype="int32"),
            keras.layers.Embedding(500, 4),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )


def token_data(batches: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    return rng.integers(0, 500, (batches * gm.BATCH, 4)), rng.standard_normal(
        (batches * gm.BATCH, 1), "float32"
    )


def resource_gathers(guard_model: keras.Model) -> int:
    """ResourceGather ops (row reads of a variable) in the guarded step's graph and the functions it calls."""
    from pyadapter.capture.train_function import cached_functions

    (function,) = cached_functions(guard_model).values()
    (concrete,) = function._one_step._list_all_concrete_functions()  # the one trace of the step
    graph = concrete.graph.as_graph_def()
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    return sum(node.op == "ResourceGather" for node in nodes)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_weights_check_of_an_embedding_table(tmp_path, optimizer):
    """SGD writes only the rows a batch looked up (IndexedSlices -> scatter_sub), so the weights check reads those
    rows, not the table (the table read whole doubled a 1M-row recommender's step); it must still catch the rows
    going infinite. Adam writes every row (its moments are dense), so the whole table is checked: with epsilon=0
    the rows no batch looked up become 0/0 = NaN in the first update, with finite gradients."""
    keras.utils.set_random_seed(4)
    x, y = token_data(4)
    model = embedding_model()
    if optimizer == "sgd":
        model.compile(gm.BreaksAtStep(2), "mse", jit_compile=False)
    else:
        model.compile(keras.optimizers.Adam(0.01, epsilon=0.0), "mse", jit_compile=False)
    guard = NanGuard(tmp_path, window=0)
    fit(model, x, y, guard)
    failure = guard.failures[0]
    assert failure.step == (2 if optimizer == "sgd" else 0), failure
    assert not failure.report.gradients and not failure.report.loss, failure.report
    assert any(name.endswith("/embeddings") for name in failure.report.weights), failure.report
    table = model.layers[0].embeddings.numpy()
    looked_up = np.unique(x[: (failure.step + 1) * gm.BATCH])
    if optimizer == "sgd":
        # Rows outside the batches are untouched and finite; the failing batch's rows are not.
        assert np.isfinite(np.delete(table, looked_up, axis=0)).all()
        assert resource_gathers(model) >= 2, "the table's rows are read by row (check and history sample)"
    else:
        assert not np.isfinite(np.delete(table, looked_up, axis=0)).all()


def test_run_eagerly(tmp_path):
    keras.utils.set_random_seed(10)
    x, y = gm.data(batches=4, bad_batch=1)
    model = gm.sequential()
    model.compile(keras.optimizers.SGD(0.01), "mse", run_eagerly=True)
    guard = NanGuard(tmp_path)
    fit(model, x, y, guard)
    assert [f.step for f in guard.failures] == [1]
    bx, _ = CaptureBundle.load(guard.last_bundle).batch()
    assert np.array_equal(bx, bad_batch(x, y, 1)[0], equal_nan=True)


def test_bundle_write_failure_still_stops_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    from pyadapter.capture import keras_state

    original = keras_state.save_keras_state

    def crash_mid_write(writer, model, seed_states, **kwargs):
        original(writer, model, seed_states, **kwargs)  # model.keras and weights.npz are on disk by now
        raise OSError("disk full (injected)")

    monkeypatch.setattr(keras_state, "save_keras_state", crash_mid_write)
    keras.utils.set_random_seed(11)
    x, y = gm.data(batches=4, bad_batch=2)
    model = gm.sequential()
    model.compile(keras.optimizers.SGD(0.01), "mse")
    guard = NanGuard(tmp_path)
    fit(model, x, y, guard)
    assert [f.step for f in guard.failures] == [2] and guard.failures[0].bundle is None
    assert int(model.optimizer.iterations.numpy()) == 2
    assert list(tmp_path.iterdir()) == [], "neither a bundle nor a temporary directory is left"
    assert "could not write the capture bundle: OSError: disk full (injected)" in capsys.readouterr().err


def test_recompiling_retraces_the_guarded_step(tmp_path):
    """A second fit reuses the guarded function, but not after compile() changed the loss."""
    keras.utils.set_random_seed(12)
    x, y = gm.data(batches=3, bad_batch=None)
    model = gm.sequential()
    model.compile(keras.optimizers.SGD(0.01), "mse")
    guard = NanGuard(tmp_path)
    fit(model, x, y, guard)
    fit(model, x, y, guard)
    assert guard.failures == []

    def broken_loss(y_true, y_pred):
        return tf.reduce_mean(tf.sqrt(y_pred - 1e6))  # sqrt of a negative number: NaN

    model.compile(model.optimizer, broken_loss)  # same optimizer object: only the loss changed
    fit(model, x, y, guard)
    assert [f.step for f in guard.failures] == [6], "the new loss is the one that runs"


def batch_norm_model() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((gm.FEATURES,)),
            keras.layers.Dense(8),
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
            keras.layers.Dense(1),
        ]
    )


@pytest.mark.parametrize("on_nan", ["skip", "stop"])
def test_a_skipped_batch_leaves_batch_normalization_statistics_as_they_were(tmp_path, on_nan):
    """A NaN batch's forward pass writes NaN into BatchNormalization's moving mean and variance before any gradient
    exists. The gate withheld the update, but the statistics stayed NaN: skip mode went on with a model whose
    validation and predictions were all NaN, and a stop-mode bundle held NaN "before the step"."""
    keras.utils.set_random_seed(3)
    x, y = gm.data(batches=6, bad_batch=3)
    model = batch_norm_model()
    model.compile(keras.optimizers.Adam(0.01), "mse")
    norm = model.layers[1]
    before = [v.numpy().copy() for v in (norm.moving_mean, norm.moving_variance)]
    guard = NanGuard(tmp_path, on_nan=on_nan, locate=False)
    x_val, y_val = gm.data(batches=2, bad_batch=None, seed=1)
    history = fit(model, x, y, guard, epochs=1, validation_data=(x_val, y_val))
    assert [f.step for f in guard.failures] == [3]
    stats = [v.numpy() for v in (norm.moving_mean, norm.moving_variance)]
    assert gm.all_finite(stats), "the failing step's statistics were put back"
    assert not all(np.array_equal(a, b) for a, b in zip(before, stats, strict=True)), (
        "healthy steps update them"
    )
    if on_nan == "skip":
        assert np.isfinite(history.history["val_loss"]).all(), history.history
        assert np.isfinite(model.predict(x_val, verbose=0)).all()
    else:
        weights = CaptureBundle.load(guard.last_bundle).weights()
        assert gm.all_finite([v for k, v in weights.items() if "moving" in k]), sorted(weights)


def test_a_moving_variance_the_forward_pass_overflowed_stops_the_step_with_a_finite_loss(tmp_path):
    """A feature in units of 1e20 into Dense -> BatchNormalization: the batch variance overflows float32, the moving
    variance goes +Inf, and the loss and gradients stay finite. The guard never stopped and predict read the Inf
    variance. The step now stops without its update, names the moving variance, and puts it back."""
    keras.utils.set_random_seed(0)
    x, y = gm.data(batches=4, bad_batch=None)
    x[:, 0] *= 1e20
    model = batch_norm_model()
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    norm = model.layers[1]
    kernel = model.layers[0].kernel.numpy().copy()
    guard = NanGuard(tmp_path, locate=False)
    fit(model, x, y, guard, epochs=1)
    assert [f.step for f in guard.failures] == [0]
    report = guard.failures[0].report
    assert report.forward_state == [norm.moving_variance.path] and not report.update_applied, report
    assert report.summary().startswith("non-finite values the forward pass wrote to"), report.summary()
    assert gm.all_finite([norm.moving_mean.numpy(), norm.moving_variance.numpy()])
    assert np.array_equal(model.layers[0].kernel.numpy(), kernel), "no update was applied"
    assert np.isfinite(model.predict(x[:8] / 1e20, verbose=0)).all()


class BestSoFar(keras.layers.Layer):
    """Keeps, in a non-trainable weight its forward pass writes, the smallest activation above a threshold seen so
    far: +inf until one is seen (a "best so far" that starts at inf), which is not the step's doing."""

    def build(self, input_shape):
        self.best = self.add_weight(
            shape=(), initializer=keras.initializers.Constant(np.inf), trainable=False
        )

    def call(self, x):
        above = tf.where(x > 1e9, x, tf.fill(tf.shape(x), np.inf))
        self.best.assign(tf.minimum(self.best, tf.reduce_min(above)))
        return x


def test_a_state_that_held_inf_before_the_step_does_not_stop_training(tmp_path):
    """The forward pass's state is judged on what the step made of it: a weight that was +Inf before the step (an
    initial "best so far") and still is, is not a failure, or every step of such a model would stop."""
    keras.utils.set_random_seed(0)
    x, y = gm.data(batches=3, bad_batch=None)
    model = keras.Sequential(
        [keras.Input((gm.FEATURES,)), keras.layers.Dense(4), BestSoFar(), keras.layers.Dense(1)]
    )
    model.compile(keras.optimizers.SGD(0.01), "mse")
    guard = NanGuard(tmp_path, locate=False)
    fit(model, x, y, guard, epochs=1)
    assert guard.failures == [] and np.isinf(model.layers[1].best.numpy())


class CriticSteps(keras.Model):
    """keras.io's WGAN-GP shape: one optimizer applied several times in one train_step (the critic's extra steps).
    The second sub-update's loss is not finite (its gate skips it); the first and third are finite and apply."""

    def train_step(self, data):
        x, y = data
        for index in range(3):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(self(x, training=True) - y))
                if index == 1:
                    loss = loss * tf.constant(float("inf"))
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables, strict=True))
        return {"loss": loss}


def test_a_step_of_several_updates_by_one_optimizer_is_taken_back_whole(tmp_path):
    """The first sub-update applied, the second was skipped, the third applied from the state after the first. The
    take-back undid the first (back to the step's start) and then the third (back to its own start, after the
    first): the step's first update stayed, and the bundle held that mid-step state. Undone last first, the model
    and optimizer are as the step found them."""
    keras.utils.set_random_seed(1)
    x, y = gm.data(bad_batch=None)
    inputs = keras.Input(x.shape[1:])
    model = CriticSteps(inputs, keras.layers.Dense(y.shape[-1])(keras.layers.Dense(8)(inputs)))
    model.compile(keras.optimizers.Adam(0.01))
    before = [w.copy() for w in model.get_weights()]
    guard = NanGuard(tmp_path, locate=False)
    fit(model, x, y, guard)

    assert [f.step for f in guard.failures] == [0]
    assert int(model.optimizer.iterations.numpy()) == 0, "no sub-update of the failing step stays"
    for now, then in zip(model.get_weights(), before, strict=True):
        np.testing.assert_array_equal(now, then)
    bundle = CaptureBundle.load(guard.last_bundle)
    assert bundle.manifest["optimizer_iterations"] == 0, bundle.manifest.get("optimizer_iterations")
    saved = bundle.weights()
    for variable, then in zip(model.weights, before, strict=True):
        np.testing.assert_array_equal(saved[variable.path], then)


def test_a_layer_that_cannot_be_saved_is_named_in_the_bundle(tmp_path, capsys):
    """A custom layer whose constructor takes a numpy array and that has no get_config: model.keras cannot be
    written. The bundle said only "NotImplementedError: " (Keras's message starts with a newline), and the replay's
    route "rebuilding from the bundle failed (the bundle has no model.keras)". It names the layer now."""

    class Centers(keras.layers.Layer):
        def __init__(self, centers, **kwargs):
            super().__init__(**kwargs)
            self.centers = centers

        def call(self, x):
            return tf.math.log(x - self.centers.sum())  # NaN: the sum of the centers is large

    model = keras.Sequential(
        [keras.Input((3,)), Centers(np.full((2, 3), 5.0, np.float32)), keras.layers.Dense(1)]
    )
    model.compile("sgd", "mse")
    x, y = np.ones((16, 3), np.float32), np.ones((16, 1), np.float32)
    fit(model, x, y, NanGuard(str(tmp_path), locate=False))
    (bundle,) = [CaptureBundle.load(p) for p in tmp_path.iterdir() if p.is_dir()]
    assert bundle.model_path is None
    assert "file" not in bundle.model_info, "the manifest named a model.keras the bundle does not hold"
    assert bundle.manifest["model_save_error"].startswith(
        "NotImplementedError: Object Centers was created by passing non-serializable argument values"
    ), bundle.manifest["model_save_error"]
    # Said at the stop too, where the class can still be given a get_config (it was in the manifest only).
    assert (
        "NanGuard: note: the model could not be saved as model.keras (NotImplementedError: Object Centers"
        in (capsys.readouterr().err)
    )


def test_weights_given_to_the_model_as_nan_are_not_searched_for_a_learning_rate(tmp_path, capsys):
    """A fit that begins from NaN weights (set from a run that had blown up): no update of this fit made them, so
    no learning rate of this fit helps. The guard replayed its window at lower rates all the same ("the run
    diverged: replaying the last 1 step ... at lower learning rates"), to say no rate helped."""
    keras.utils.set_random_seed(3)
    x, y = gm.data(bad_batch=None)
    model = keras.Sequential([keras.Input((x.shape[1],)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    model.set_weights([np.full_like(w, np.nan) for w in model.get_weights()])
    fit(model, x, y, NanGuard(str(tmp_path)))
    err = capsys.readouterr().err
    (bundle,) = [CaptureBundle.load(p) for p in tmp_path.iterdir() if p.is_dir()]
    assert bundle.step == 0
    assert "at lower learning rates" not in err, err
    assert "search" not in (bundle.manifest.get("window") or {}), bundle.manifest["window"]
    assert "the weights were already non-finite when this fit began" in err, err


def test_a_skip_mode_bundle_per_epoch_does_not_repeat_keras_warnings(tmp_path):
    """A generator dataset (Keras warns once that it "ran out of data": its length is unknown) and a bad batch in
    every epoch under skip mode: each epoch wrote a bundle, whose model.keras was saved inside
    warnings.catch_warnings, which resets Python's once-per-place record: the warning came back every epoch."""
    import subprocess

    program = tmp_path / "train.py"
    program.write_text(
        "import numpy as np, keras, tensorflow as tf\n"
        "from pyadapter import NanGuard\n"
        "def batches():\n"
        "    rng = np.random.default_rng(0)\n"
        "    for i in range(6):\n"
        "        x = rng.normal(size=(8, 3)).astype('float32')\n"
        "        if i == 3:\n"
        "            x[0, 0] = np.nan\n"
        "        yield x, np.ones((8, 1), 'float32')\n"
        "spec = (tf.TensorSpec((None, 3), tf.float32), tf.TensorSpec((None, 1), tf.float32))\n"
        "data = tf.data.Dataset.from_generator(batches, output_signature=spec)\n"
        "model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])\n"
        "model.compile('sgd', 'mse')\n"
        f"model.fit(data, epochs=3, verbose=0, callbacks=[NanGuard({str(tmp_path / 'captures')!r}, on_nan='skip', "
        "locate=False)])\n"
    )
    done = subprocess.run(
        [sys.executable, str(program)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(list((tmp_path / "captures").iterdir())) == 3  # a bundle per epoch
    assert done.stderr.count("ran out of data") == 1, done.stderr[-3000:]


def test_the_scene_says_why_its_dumped_step_has_more_nan_gradients_than_training(tmp_path):
    """A NaN made in the model (a log of a negative feature) into Dense(relu): training's compiled step fuses the
    ReLU (NaN becomes 0) and sees fewer gradients non-finite than the scene's dumped re-run, which runs it unfused.
    `nanlens locate` on the bundle printed both figures with no word; `locate --replay` said why. The scene says it
    too."""
    import json

    rng = np.random.default_rng(0)
    x = (np.abs(rng.normal(size=(64, 4))) + 0.1).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    x[40, 1] = -1.0  # the log makes NaN in the model, in one row
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Lambda(tf.math.log),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse")
    fit(model, x, y, NanGuard(str(tmp_path)))
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    findings = json.loads((bundle / "findings.json").read_text())
    captured = CaptureBundle.load(bundle).non_finite.gradients
    dumped = findings["bundle"]["verdicts"]["graph"]["non_finite_gradients"]
    said = any("more non-finite gradients than training had" in w for w in findings["warnings"])
    if len(dumped) > len(captured):  # this CPU's compiled step fused the ReLU (x86 with oneDNN's fusion)
        assert said, findings["warnings"]
        assert findings["bundle"]["note"] is not None
    else:  # a CPU whose kernels do not fuse it (an AMD EPYC VM): the same counts, and nothing to explain
        assert len(dumped) == len(captured), (dumped, captured)
        assert not said, findings["warnings"]


def test_a_nan_in_the_validation_data_is_said_once_and_stops_nothing(tmp_path, capsys):
    """A NaN in the validation targets: val_loss is NaN every epoch while training is finite. NanGuard said nothing,
    and EarlyStopping / ModelCheckpoint on val_loss kept the first epoch's weights (Keras counts a NaN as best)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    x_val, y_val = x[:32].copy(), y[:32].copy()
    y_val[17] = np.nan
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    guard = NanGuard(str(tmp_path), locate=False)
    history = model.fit(x, y, validation_data=(x_val, y_val), epochs=3, verbose=0, callbacks=[guard])
    assert (
        guard.failures == [] and len(history.history["loss"]) == 3
    )  # validation is not gated: nothing stopped
    said = capsys.readouterr().err
    assert said.count("NanGuard: val_loss is not finite at epoch 0 while the training steps were") == 1, said
    assert "the validation data holds NaN/Inf: y column 0: 1 of 32 rows (first: row 17)" in said, said


def test_a_validation_column_a_target_encoding_left_nan_is_named(tmp_path, capsys):
    """A target encoding maps the validation split's categories unseen in training to NaN (s38e p9): val_loss is
    NaN while training is finite, and the user looked for the column by hand. The message names the validation
    DataFrame's column; with finite validation arrays it says the model makes the NaN there."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"rooms": rng.normal(size=96), "area": rng.normal(size=96)})
    frame["hood_te"] = rng.normal(size=96)
    target = frame.sum(axis=1).to_numpy("float32")
    valid = frame[:32].copy()
    valid.loc[[3, 9, 20], "hood_te"] = np.nan
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    fit = dict(epochs=1, verbose=0)
    model.fit(frame, target, validation_data=(valid, target[:32]), callbacks=[NanGuard(str(tmp_path))], **fit)
    said = capsys.readouterr().err
    assert "the validation data holds NaN/Inf: x column 2 ('hood_te'): 3 of 32 rows (first: row 3)" in said, (
        said
    )

    log_model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Lambda(keras.ops.log), keras.layers.Dense(1)]
    )
    log_model.compile("sgd", "mse")
    positive = np.abs(frame.to_numpy("float32")) + 1.0
    zero = positive[:32].copy()
    zero[5, 0] = 0.0  # finite, but log(0) = -inf inside the model: only the validation data meets it
    log_model.fit(
        positive, target, validation_data=(zero, target[:32]), callbacks=[NanGuard(str(tmp_path))], **fit
    )
    said = capsys.readouterr().err
    assert "the validation arrays are finite, so the model makes it only on them" in said, said


def test_the_validation_message_under_a_progress_bar_starts_a_line_of_its_own(tmp_path, capsys):
    """With fit's progress bar (verbose=1), the val_loss message was printed while the bar's line was open and read
    as part of it ("... 3ms/step - loss: 0.52NanGuard: val_loss ..."): a user saw nothing from NanGuard. It ends the
    bar's line first."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    y_val = y[:16].copy()
    y_val[3] = np.nan
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(x, y, validation_data=(x[:16], y_val), epochs=1, verbose=1, callbacks=[NanGuard(str(tmp_path))])
    said = capsys.readouterr().err
    at = said.index("NanGuard: val_loss is not finite at epoch 0")
    assert said[:at].endswith("\n\n") or said[:at] == "\n", repr(said[max(0, at - 40) : at + 40])


def test_a_metric_that_computes_nan_is_not_blamed_on_the_validation_data(tmp_path, capsys):
    """A metric of the user's divides by the batch's positives, 0 in some batches: the metric is NaN in training and
    validation while the loss and every step are finite. NanGuard said the validation data held NaN/Inf."""

    class BatchRecall(keras.metrics.Metric):
        def __init__(self, name="batch_recall", **kwargs):
            super().__init__(name=name, **kwargs)
            self.total = self.add_variable((), initializer="zeros", name="total")
            self.count = self.add_variable((), initializer="zeros", name="count")

        def update_state(self, y_true, y_pred, sample_weight=None):
            positives = keras.ops.sum(y_true)
            hits = keras.ops.sum(y_true * keras.ops.cast(y_pred > 0.5, "float32"))
            self.total.assign_add(hits / positives)  # 0 / 0 for a batch with no positive
            self.count.assign_add(1.0)

        def result(self):
            return self.total / self.count

    rng = np.random.default_rng(1)
    x = rng.normal(size=(160, 4)).astype("float32")
    y = np.zeros((160, 1), "float32")
    y[::40] = 1.0  # batches of 16: most have no positive
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile("sgd", "binary_crossentropy", metrics=[BatchRecall()])
    guard = NanGuard(str(tmp_path), locate=False)
    model.fit(x, y, batch_size=16, validation_split=0.25, epochs=2, verbose=0, callbacks=[guard])
    assert guard.failures == []
    said = capsys.readouterr().err
    assert "validation data" not in said, said
    assert (
        said.count("NanGuard: the metric batch_recall is not finite at epoch 0 while the loss and every") == 1
    )

    # NaN in validation only (every training batch has a positive, no validation batch has one): val_loss is
    # finite, so the model and the validation data are not to blame either; it said "the validation data holds
    # NaN/Inf, or the model makes it only there".
    y[::4] = 1.0
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile("sgd", "binary_crossentropy", metrics=[BatchRecall()])
    guard = NanGuard(str(tmp_path), locate=False)
    history = model.fit(
        x[:120],
        y[:120],
        batch_size=16,
        validation_data=(x[120:], np.zeros((40, 1), "float32")),
        epochs=1,
        verbose=0,
        callbacks=[guard],
    )
    assert np.isfinite(history.history["val_loss"][0]) and np.isnan(history.history["val_batch_recall"][0])
    said = capsys.readouterr().err
    assert "validation data" not in said, said
    assert (
        "the metric val_batch_recall is not finite at epoch 0 while the loss, val_loss and every" in said
    ), said


def test_an_epoch_whose_every_step_was_skipped_reports_nan_not_a_perfect_loss(tmp_path, capsys):
    """Skip mode after a divergence: every step refused, and Keras's mean of no batch read loss 0.0. A
    ModelCheckpoint(monitor="loss", save_best_only=True) listed before NanGuard saved the blown-up weights as the
    best epoch, and EarlyStopping(restore_best_weights=True) restored them. Such an epoch's training metrics are now
    NaN for every callback, whatever their order."""
    keras.utils.set_random_seed(1)
    rng = np.random.default_rng(0)
    x = rng.normal(0, 2.0, size=(640, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1)).astype("float32") + 0.1 * rng.normal(size=(640, 1))).astype("float32")
    x, y = x[:512], y[:512]
    model = keras.Sequential(
        [keras.Input(shape=(8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.072), loss="mse", metrics=["mae"])
    best = tmp_path / "best.keras"
    callbacks = [
        keras.callbacks.ModelCheckpoint(str(best), monitor="loss", save_best_only=True),
        keras.callbacks.EarlyStopping(monitor="loss", patience=2, restore_best_weights=True),
        NanGuard(tmp_path / "captures", on_nan="skip", locate=False, max_bundles=1),
    ]
    history = model.fit(x, y, epochs=8, batch_size=32, callbacks=callbacks, verbose=0)
    losses = history.history["loss"]
    assert 0.0 not in losses, losses
    assert any(np.isnan(v) for v in losses), losses  # the divergence did skip whole epochs
    saved = keras.models.load_model(best)
    assert np.all(np.isfinite(saved.evaluate(x, y, verbose=0))), "the checkpoint kept an epoch that trained"
    assert "NanGuard: every step of epoch" in capsys.readouterr().err

    # Stop mode: a first step of an epoch that fails stops training; nothing was skipped, and nothing says so.
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01), loss="mse")
    x[0, 0] = np.nan
    guard = NanGuard(tmp_path / "stop", locate=False)
    model.fit(x, y, epochs=1, batch_size=32, shuffle=False, callbacks=[guard], verbose=0)
    assert [f.step for f in guard.failures] == [0]
    assert "skipped" not in capsys.readouterr().err


def test_the_last_word_after_keras_epoch_line_says_its_nan_loss_is_the_refused_step(tmp_path, capsys):
    """Keras ends the epoch after the stopped step and prints its line, "loss: nan", after NanGuard's message; History
    and CSVLogger keep that loss. Three users read it as "the guard did not work". NanGuard's last line, after the
    progress bar, says whose loss that is and that the model holds the weights from before it."""
    keras.utils.set_random_seed(1)
    x, y = gm.data(bad_batch=3)
    model = gm.sequential()
    model.compile(keras.optimizers.Adam(0.01), "mse")
    guard = NanGuard(tmp_path, run_name="seq")
    history = model.fit(x, y, batch_size=gm.BATCH, epochs=2, shuffle=False, verbose=2, callbacks=[guard])

    assert not np.isfinite(history.history["loss"][0]), "Keras's epoch mean counts the refused step"
    captured = capsys.readouterr()
    assert "loss: nan" in captured.out
    last = captured.err.strip().splitlines()[-1]
    assert last.startswith("NanGuard: the loss Keras shows above") and "counts step 3" in last, last
    assert "the model holds its weights from before step 3" in last and str(guard.last_bundle) in last
    assert gm.all_finite(model.get_weights())


class _LogOfRawScale(keras.layers.Layer):
    """A learned scale read through a log, kept by nothing from crossing 0 (a raw variational-dropout alpha)."""

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(), initializer=keras.initializers.Constant(0.05), name="scale")

    def call(self, x):
        self.add_loss(keras.ops.log(self.scale))  # d/dscale = 1/scale: one SGD step at 0.1 carries it below 0
        return x


def fit_validated_on_training_data(model, x, y, guard):
    return model.fit(
        x,
        y,
        batch_size=gm.BATCH,
        epochs=1,
        shuffle=False,
        verbose=2,
        validation_data=(x, y),
        callbacks=[guard],
    )


def test_the_last_word_says_whose_nan_val_loss_keras_shows_after_the_stopped_epoch(tmp_path, capsys):
    """Keras validates the stopped epoch at the weights the guard held, and prints "val_loss: nan" beside "the model
    holds its weights from before step N": read as "the guard did not work" (a raw scale an update carried below 0,
    a model at 1e16). The last line says that NaN is those weights' own; with a batch that held the NaN (no cause
    at the scene), that the validation data may hold NaN too."""
    keras.utils.set_random_seed(1)
    x, y = gm.data(bad_batch=None)
    model = keras.Sequential([keras.Input((x.shape[1],)), _LogOfRawScale(), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.1), "mse")
    fit_validated_on_training_data(model, x, y, NanGuard(tmp_path / "scale"))
    captured = capsys.readouterr()
    assert "val_loss: nan" in captured.out
    last = captured.err.strip().splitlines()[-1]
    assert "the model holds its weights from before step 1" in last, last
    said = (
        "the val_loss: nan above is what those weights give on the validation data: they had gone bad before"
    )
    assert said in last, last

    x, y = gm.data(bad_batch=3)
    model = gm.sequential()
    model.compile(keras.optimizers.Adam(0.01), "mse")
    fit_validated_on_training_data(model, x, y, NanGuard(tmp_path / "data"))
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "on the validation data: it holds NaN/Inf too, or those weights had gone bad" in last, last

    # A loss's own 0 / 0 (a Dice ratio on an empty mask) meets the validation records too: the weights were fine,
    # and "they had gone bad before this step" sent a user after them.
    def ratio(y_true, y_pred):
        return tf.reduce_sum(tf.square(y_true - y_pred)) / tf.reduce_sum(tf.abs(y_true))

    x, y = gm.data(bad_batch=None)
    y[2 * gm.BATCH : 3 * gm.BATCH] = 0.0  # an empty batch of targets
    model = gm.sequential()
    model.compile(keras.optimizers.SGD(0.01), ratio)
    fit_validated_on_training_data(model, x, y, NanGuard(tmp_path / "ratio"))
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "on the validation data: the cause above makes it there too" in last, last


def test_the_last_word_says_the_stopped_step_had_a_finite_loss_when_only_its_gradients_were_not(
    tmp_path, capsys
):
    """A tf.where over a log of 0 (the where trap): the loss is finite, its gradients NaN. The last line called the
    step "the non-finite step" beside a progress line showing a finite loss."""
    import tensorflow as tf

    def trapped(y_true, y_pred):
        hinge = tf.where(y_pred > 100.0, tf.math.log(y_pred * 0.0), tf.zeros_like(y_pred))
        return tf.reduce_mean(tf.square(y_true - y_pred)) + tf.reduce_mean(hinge)

    keras.utils.set_random_seed(1)
    x, y = gm.data(bad_batch=None)
    model = gm.sequential()
    model.compile(keras.optimizers.SGD(0.01), trapped)
    guard = NanGuard(tmp_path, run_name="trap", locate=False)
    model.fit(x, y, batch_size=gm.BATCH, epochs=1, shuffle=False, verbose=2, callbacks=[guard])
    report = guard.failures[0].report
    assert not report.loss and report.gradients, report
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert (
        "counts step 0, the step NanGuard stopped at (its loss was finite, its gradients were not)" in last
    ), last

    # A train_step that differentiates a per-sample loss (keras.io's SimCLR) gives the guard no scalar loss to read,
    # and Keras shows "loss: nan" for a step whose every value was NaN: the last line said "its loss was finite".
    class PerSample(keras.Sequential):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                per_sample = tf.reduce_mean(tf.square(self(x, training=True) - y), axis=-1)
            grads = tape.gradient(per_sample, self.trainable_variables)
            self.optimizer.apply(grads, self.trainable_variables)
            return {"loss": tf.reduce_mean(per_sample)}

    x, y = gm.data(bad_batch=2)
    model = PerSample(gm.sequential().layers)
    model.compile(keras.optimizers.SGD(0.01))
    guard = NanGuard(tmp_path, run_name="per_sample", locate=False)
    model.fit(x, y, batch_size=gm.BATCH, epochs=1, shuffle=False, verbose=2, callbacks=[guard])
    assert "loss" not in guard.failures[0].report.checked, guard.failures[0].report
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "the step NanGuard stopped at (its gradients were not finite)" in last, last


def test_an_epoch_loss_that_overflows_while_every_step_is_finite_is_said(tmp_path, capsys):
    """Targets in nanoseconds (1.7e18): each step's squared error is about 3e36, finite, and Keras's running mean
    of the epoch's losses overflows to inf. Keras showed "loss: inf" every epoch, and the guard, no step having
    failed, said nothing and wrote nothing. It says what the inf is and what to scale."""
    keras.utils.set_random_seed(5)
    x, y = gm.data(batches=8, bad_batch=None)
    y = (y + 3.0) * 1.7e18
    model = gm.sequential()
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    guard = NanGuard(tmp_path)
    history = fit(model, x, y, guard, epochs=2)
    assert not guard.failures and not any(p.is_dir() for p in tmp_path.iterdir())
    assert not np.isfinite(history.history["loss"][0]), history.history
    message = capsys.readouterr().err
    assert (
        "NanGuard: the loss Keras shows for epoch 0 is inf while every step's loss was finite (up to "
        in message
    )
    assert "overflowed float32" in message and "unscaled targets or features" in message, message
    assert message.count("running mean of the epoch's losses") == 1, "said once"


class _SolveByDiagonal(keras.layers.Layer):
    """A hand-written linear flow's inverse: solve(diag(relu(s)), x), singular once an entry of s reaches 0."""

    def build(self, input_shape):
        self.s = self.add_weight(shape=(input_shape[-1],), initializer="ones")

    def call(self, x):
        matrix = tf.linalg.diag(tf.nn.relu(self.s))
        return tf.transpose(tf.linalg.solve(matrix, tf.transpose(x)))  # the op that raises


def test_a_step_that_raises_names_the_programs_line_and_says_it_is_not_nanguards(tmp_path, capsys):
    """On CPU a singular matrix makes MatrixSolve raise, not NaN. Under NanGuard the error read as NanGuard's crash:
    the traceback ended in its train function and TensorFlow's message lost the op's line ("<lambda>" stopped
    TensorFlow's parser of it)."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, _SolveByDiagonal()(inputs))
    model.compile(keras.optimizers.SGD(5.0), "mse")  # the first update drives s through 0
    x = np.random.default_rng(0).random((64, 4)).astype("float32")
    guard = NanGuard(tmp_path)
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        model.fit(x, x * 3 + 5, batch_size=16, epochs=2, verbose=0, callbacks=[guard])

    message = str(raised.value)
    solve_line = next(
        number
        for number, line in enumerate(Path(__file__).read_text().splitlines(), 1)
        if "# the op that raises" in line and "tf.linalg.solve" in line
    )
    assert f'{Path(__file__).name}", line {solve_line}, in call' in message, message
    said = capsys.readouterr().err
    assert "NanGuard: step 1 (epoch 0, batch 1; counting from 0) raised InvalidArgumentError" in said, said
    assert "not NanGuard's" in said and "No bundle" in said and "jitter" in said
    # A jitter scaled to the matrix: 1e-6, followed in a ridge head, vanished beside a diagonal of 1e2 and raised
    # again; and what usually makes a Gram matrix singular.
    assert "1e-3 * the mean of its diagonal" in said and "two identical rows" in said, said
    # Only the frame that re-raises is NanGuard's (it was __call__, _run and _traced, ending the traceback).
    frames = [frame.filename for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert sum("pyadapter" in name for name in frames) == 1, frames
    assert model.train_function is not None and type(model.train_function).__name__ != "GuardedTrainFunction"
    assert not list(tmp_path.iterdir())


def test_a_guard_made_for_each_fit_of_a_model_keeps_the_earlier_fits_steps(tmp_path):
    """``for epoch in range(E): model.fit(..., epochs=1, callbacks=[NanGuard(...)])`` with the program's own rate
    decay between fits (written with a sign error, so the rate rises): each guard recorded its own fit's steps only,
    so the rise the program made between fits was unseen and the advice ("try 0.0374") could not be followed. A
    guard of a later fit of the same model starts from the steps the earlier ones recorded."""
    keras.utils.set_random_seed(5)
    x, y = gm.data(batches=4, bad_batch=None)
    bad_x, bad_y = gm.data(batches=4, bad_batch=2, seed=1)
    model = gm.sequential()
    model.compile(keras.optimizers.SGD(0.01), "mse")
    for epoch in range(3):
        model.optimizer.learning_rate.assign(0.01 * 2.0**epoch)
        fit(model, x, y, NanGuard(tmp_path, verbose=False))
    guard = NanGuard(tmp_path, verbose=False)
    fit(model, bad_x, bad_y, guard)
    (failure,) = guard.failures
    assert failure.step == 14, failure
    bundle = CaptureBundle.load(guard.last_bundle)
    assert [h["step"] for h in bundle.loss_history] == list(range(15)), bundle.loss_history
    rates = [round(h["learning_rate"], 6) for h in bundle.loss_history[:12]]
    assert rates == [0.01] * 4 + [0.02] * 4 + [0.04] * 4, rates
    # Another model's guard starts from nothing.
    other = gm.sequential()
    other.compile(keras.optimizers.SGD(0.01), "mse")
    fresh = NanGuard(tmp_path / "other", verbose=False)
    fit(other, bad_x, bad_y, fresh)
    assert [h["step"] for h in CaptureBundle.load(fresh.last_bundle).loss_history] == [0, 1, 2]


def test_a_ctc_label_longer_than_the_frames_raising_says_so_and_no_line_it_does_not_have(tmp_path, capsys):
    """A CTC loss with sparse labels longer than the logit frames raises "Not enough time for target transition
    sequence" inside Keras's compiled loss, whose message says "<stack traces unavailable>" (s42b p3). NanGuard said
    the message "names the op and its line"; it names the node only, and the labels are what to change."""
    keras.utils.set_random_seed(0)
    frames, classes = 4, 5

    def ctc(y_true, y_pred):
        labels = tf.sparse.from_dense(tf.cast(y_true, tf.int32))
        logit_length = tf.fill([tf.shape(y_pred)[0]], frames)
        return tf.nn.ctc_loss(labels, y_pred, None, logit_length, logits_time_major=False, blank_index=0)

    inputs = keras.Input((frames, 3))
    model = keras.Model(inputs, keras.layers.Dense(classes)(inputs))
    model.compile(keras.optimizers.SGD(0.01), ctc)
    x = np.random.default_rng(0).random((8, frames, 3)).astype("float32")
    y = np.tile(np.arange(1, 8, dtype=np.int32) % (classes - 1) + 1, (8, 1))  # 7 labels for 4 frames
    with pytest.raises(tf.errors.InvalidArgumentError):
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[NanGuard(tmp_path)])
    said = capsys.readouterr().err
    assert "raised InvalidArgumentError" in said and "not NanGuard's" in said, said
    assert "names the op and its line" not in said, said
    assert "a CTC label is longer than the logit frames allow" in said, said
